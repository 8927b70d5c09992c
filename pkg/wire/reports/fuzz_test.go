package reports

import (
	"reflect"
	"testing"
)

// A datagram on the reports socket is foreign input: any root process on
// the node can send one. Whatever it holds, decoding never panics, and a
// report that decodes encodes within a datagram and decodes back the same,
// strings aside when they had to be cut.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"verb":"ADD","pod":"default/web","redirect":true,"reason":"redirect","duration_ms":3.2}`))
	f.Add([]byte(`{"v":1,"error":"` + string(make([]byte, 5000)) + `"}`))
	f.Add([]byte(`{"v":0}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := decode(b)
		if err != nil {
			return
		}
		out, err := encode(rep)
		if err != nil {
			return // a report longer than a datagram without its strings: refused, never cut wrong
		}
		if len(out) > MaxDatagram {
			t.Fatalf("encode gave %d bytes, over %d", len(out), MaxDatagram)
		}
		back, err := decode(out)
		if err != nil {
			t.Fatalf("decode(encode(%q)) = %v", b, err)
		}
		back.V, rep.V = Version, Version
		if whole, _ := marshal(rep); len(whole) <= MaxDatagram && !reflect.DeepEqual(back, rep) {
			t.Fatalf("round trip changed the report:\n%+v\n%+v", rep, back)
		}
	})
}
