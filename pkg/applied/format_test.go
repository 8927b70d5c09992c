package applied

import (
	"testing"

	"istio-cni.local/istio-cni/test/formats"
)

// TestRecordFormatIsItsVersion: the records' fields are version Version's
// (test/formats): a field added, removed or retyped takes a new version,
// or an agent of the previous build would act on the part it knows.
func TestRecordFormatIsItsVersion(t *testing.T) {
	formats.Check(t, "record", Version, formats.JSON(Record{}))
}

// TestNewerRecordIsReadForItsHeaderOnly: a record a later build wrote, in
// whatever shape, is read for its header and nothing else; a record of no
// version is none.
func TestNewerRecordIsReadForItsHeaderOnly(t *testing.T) {
	r, ok := decode([]byte(`{"version":2,"podUID":"u1","pod":"ns/p","container":"c1","netnsInode":7,"spec":["a","shape","of","tomorrow"],"passed":"maybe"}`))
	if !ok || !r.Newer() || r.PodUID != "u1" || r.Container != "c1" || r.NetnsInode != 7 || r.Passed || r.Model().V4 != nil {
		t.Errorf("decode = %+v, %v: want the header of a newer record", r, ok)
	}
	for _, bad := range []string{`{"podUID":"u1","container":"c1"}`, `{"version":0}`, `{"version":"2"}`, `{"version":1,"spec":["x"]}`} {
		if r, ok := decode([]byte(bad)); ok {
			t.Errorf("decode(%s) = %+v: want no record", bad, r)
		}
	}
}
