package handoff

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/formats"
)

// TestFrameFormatIsItsVersion: the frames are binary, so their shape is a
// request's and an answer's bytes, every field set. See test/formats.
func TestFrameFormatIsItsVersion(t *testing.T) {
	req, err := Request{ContainerID: "c", Netns: "/n", IfName: "eth0", Args: "K=V", Path: "/opt/cni/bin",
		Stdin: []byte("{}"), Netlink: []string{"ipv4", "ipv6"}, Deadline: 0x0102030405060708}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := Response{Done: true, HandBack: "h", Stdout: []byte("o"), Stderr: []byte("e")}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	formats.Check(t, "handoff-frames", Version, "request "+hex.EncodeToString(req)+"\nresponse "+hex.EncodeToString(resp)+"\n")
}

// TestNewerFrameIsRefused: a frame of a later version is refused, by
// either side, naming its version: the shim then runs the full plugin, and
// the agent answers a newer shim with nothing it would misread.
func TestNewerFrameIsRefused(t *testing.T) {
	b, err := Request{ContainerID: "c"}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b[len(Magic)+1]++ // the version's low byte
	var ve *VersionError
	if err := new(Request).UnmarshalBinary(b); !errors.As(err, &ve) || !strings.Contains(err.Error(), "version") {
		t.Errorf("a newer request frame: %v", err)
	}
	b, err = Response{Done: true}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b[len(Magic)+1]++
	if err := new(Response).UnmarshalBinary(b); !errors.As(err, &ve) {
		t.Errorf("a newer response frame: %v", err)
	}
}
