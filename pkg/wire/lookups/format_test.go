package lookups

import (
	"testing"

	"istio-cni.local/istio-cni/test/formats"
)

// TestLookupFormatIsItsVersion: the request and the answer (the pod's
// subset among it: a field the decision reads is a field of this format).
// See test/formats.
func TestLookupFormatIsItsVersion(t *testing.T) {
	formats.Check(t, "lookup-request", Version, formats.JSON(request{}))
	formats.Check(t, "lookup-response", Version, formats.JSON(response{}))
}
