package handoff

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

var sampleRequest = Request{ContainerID: "c1", Netns: "/var/run/netns/cni-1", IfName: "eth0",
	Args: "K8S_POD_NAME=web", Path: "/opt/cni/bin", Stdin: []byte(`{"cniVersion":"1.0.0","name":"k8s"}`),
	Netlink: []string{"ipv4", "ipv6"}, Release: "1.8.11", Deadline: 1795817510882920006}

func TestFrameRoundTrip(t *testing.T) {
	for _, req := range []Request{sampleRequest, {Deadline: -1, Stdin: []byte{}}, {Release: "1.8.7", Stdin: []byte{}}, {Legacy: []string{"ipv4", "ipv6"}, Stdin: []byte{}}} {
		b, err := req.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Request
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if req.Stdin == nil {
			req.Stdin = []byte{}
		}
		if !reflect.DeepEqual(got, req) {
			t.Errorf("round trip: got %+v, want %+v", got, req)
		}
	}
	for _, resp := range []Response{{Done: true, Stdout: []byte(`{"cniVersion":"1.0.0"}`), Stderr: []byte("line\n")}, {HandBack: "why", Stdout: []byte{}, Stderr: []byte{}}} {
		b, err := resp.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Response
		if err := got.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(got, resp) {
			t.Errorf("round trip: got %+v, %v; want %+v", got, err, resp)
		}
	}
}

// Every cut of a frame, and every frame with bytes after it, is refused
// with an error, never read as a shorter request.
func TestFrameRefusals(t *testing.T) {
	b, err := sampleRequest.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(b) {
		var r Request
		if err := r.UnmarshalBinary(b[:n]); err == nil {
			t.Fatalf("a frame cut to %d of %d bytes was read", n, len(b))
		}
	}
	var r Request
	if err := r.UnmarshalBinary(append(bytes.Clone(b), 0)); err == nil || !strings.Contains(err.Error(), "after the request") {
		t.Errorf("trailing byte: %v", err)
	}
	other := bytes.Clone(b)
	other[len(Magic)+1] = Version + 1
	var verr *VersionError
	if err := r.UnmarshalBinary(other); !errors.As(err, &verr) || verr.Got != Version+1 {
		t.Errorf("another version: %v, want a VersionError", err)
	}
	if err := r.UnmarshalBinary([]byte(`{"v":1,"op":"add"}`)); err == nil || !strings.Contains(err.Error(), "not a hand-off frame") {
		t.Errorf("a JSON request: %v", err)
	}
	three, _ := Request{Netlink: []string{"ipv4", "ipv6", "ipv4"}}.MarshalBinary()
	if err := r.UnmarshalBinary(three); err == nil || !strings.Contains(err.Error(), "3 families") {
		t.Errorf("three families: %v", err)
	}
	if _, err := (Request{Stdin: make([]byte, MaxRequest)}).MarshalBinary(); err == nil {
		t.Error("a request over MaxRequest was framed")
	}
	resp, _ := Response{Done: true}.MarshalBinary()
	resp[len(Magic)+2] = 2
	var rs Response
	if err := rs.UnmarshalBinary(resp); err == nil || !strings.Contains(err.Error(), "done is 2") {
		t.Errorf("done 2: %v", err)
	}
}

func FuzzRequestFrame(f *testing.F) {
	b, _ := sampleRequest.MarshalBinary()
	f.Add(b)
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		if r.UnmarshalBinary(b) != nil {
			return
		}
		again, err := r.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("a frame read as %+v frames as %x, not %x (%v)", r, again, b, err)
		}
	})
}
