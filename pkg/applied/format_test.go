package applied

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/test/formats"
)

// TestRecordFormatIsItsVersion: the records' fields are version Version's
// (test/formats): a field added, removed or retyped takes a new version,
// or an agent of the previous build would act on the part it knows.
func TestRecordFormatIsItsVersion(t *testing.T) {
	formats.Check(t, "record", Version, formats.JSON(Record{}))
	// The header every version shares, whatever its number.
	formats.Check(t, "record-header", 1, formats.JSON(header{}))
}

// TestRecordAsWrittenIsRead: a record as each version writes it, frozen,
// is read back whole by this build: the bytes an older build left on the
// node, not only their shape. Version 1 is an iptables sandbox's (every
// build since writes those as 1), 2 a native nftables one's, 3 one whose
// families went to two iptables backends.
func TestRecordAsWrittenIsRead(t *testing.T) {
	for v := 1; v <= Version; v++ {
		want := Record{Version: v, PodUID: "u1", Pod: "ns/p", Container: "c1", NetnsInode: 7, IPv4: true, IPv6: true, Backend: "nft",
			Spec: iptables.DefaultSpec(), At: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
		want.Spec.InvalidDrop, want.Spec.DNSCapture, want.Spec.TProxy = true, true, true
		want.Spec.OutboundIPExclude = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		want.Spec.ExcludeInterfaces = []iptables.IfName{"eth9"}
		switch v {
		case 2:
			want.Backend, want.Native = "", true
		case 3:
			want.BackendIPv6 = "legacy"
		}
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		formats.Check(t, "record-sample", v, string(b)+"\n")
		frozen, err := os.ReadFile(filepath.Join("testdata", "formats", fmt.Sprintf("record-sample.v%d.txt", v)))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := decode(bytes.TrimSpace(frozen))
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("v%d: decode(the frozen record) = %+v, %v; want %+v", v, got, ok, want)
		}
	}
}

// TestRecordSaysTheOldestVersionThatHoldsIt: an iptables sandbox's
// record is still version 1, which the build before native nftables
// audits; a native one's is 2, which that build leaves alone; one whose
// IPv6 rules are in another backend than its IPv4 ones is 3, which the
// builds before it leave alone.
func TestRecordSaysTheOldestVersionThatHoldsIt(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	for i, tc := range []struct {
		native bool
		v6     release.Backend
		want   int
	}{{false, "", 1}, {true, "", 2}, {false, release.Legacy, 3}} {
		native := tc.native
		r := Record{PodUID: "u1", Pod: "ns/p", Container: fmt.Sprint("c", i), IPv4: true, IPv6: tc.v6 != "", Spec: iptables.DefaultSpec(), Native: native,
			Backend: release.NFT, BackendIPv6: tc.v6}
		if native {
			r.Backend = ""
		}
		if err := s.Write(r); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(s.Dir, r.PodUID, r.Container+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var h header
		if err := json.Unmarshal(data, &h); err != nil {
			t.Fatal(err)
		}
		if h.Version != tc.want {
			t.Errorf("%+v: record version %d, want %d", tc, h.Version, tc.want)
		}
	}
}

// TestNewerRecordIsReadForItsHeaderOnly: a record a later build wrote, in
// whatever shape, is read for its header and nothing else; a record of no
// version is none.
func TestNewerRecordIsReadForItsHeaderOnly(t *testing.T) {
	r, ok := decode([]byte(`{"version":4,"podUID":"u1","pod":"ns/p","container":"c1","netnsInode":7,"spec":["a","shape","of","tomorrow"],"ipv4":"both"}`))
	if !ok || !r.Newer() || r.PodUID != "u1" || r.Container != "c1" || r.NetnsInode != 7 || r.Passed {
		t.Errorf("decode = %+v, %v: want the header of a newer record", r, ok)
	}
	if m, known := r.Model(); known || m.V4 != nil {
		t.Errorf("a newer record's model: %v: want unknown, not \"no rules\"", known)
	}
	// A sandbox a newer build passed through is one no build programmed.
	if r, ok := decode([]byte(`{"version":4,"podUID":"u1","container":"c1","netnsInode":7,"passed":true,"spec":7}`)); !ok || !r.Passed || !r.Newer() {
		t.Errorf("decode = %+v, %v: want a newer record that passed", r, ok)
	}
	for _, bad := range []string{`{"podUID":"u1","container":"c1"}`, `{"version":0}`, `{"version":"2"}`, `{"version":1,"spec":["x"]}`} {
		if r, ok := decode([]byte(bad)); ok {
			t.Errorf("decode(%s) = %+v: want no record", bad, r)
		}
	}
}
