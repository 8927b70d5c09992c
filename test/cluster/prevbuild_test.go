package cluster

import (
	"strings"
	"testing"
)

// A previous build whose commit the clone lacks (a shallow clone) fails
// the version-skew test, saying how to fetch it: never a silent skip.
func TestPreviousBuildNotInHistory(t *testing.T) {
	const missing = "0123456789abcdef0123456789abcdef01234567"
	_, err := BuildPreviousImage(t.Context(), missing)
	if err == nil || !strings.Contains(err.Error(), "is not in the history of the clone") || !strings.Contains(err.Error(), "git fetch") {
		t.Fatalf("BuildPreviousImage(%s): %v, want an error naming the missing commit and how to fetch it", missing, err)
	}
}
