package reports

import (
	"testing"

	"istio-cni.local/istio-cni/test/formats"
)

// TestReportFormatIsItsVersion: see test/formats.
func TestReportFormatIsItsVersion(t *testing.T) {
	formats.Check(t, "report", Version, formats.JSON(Report{}))
}
