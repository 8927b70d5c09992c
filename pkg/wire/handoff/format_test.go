package handoff

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/formats"
)

// TestFrameFormatIsItsVersion: the frames are binary, so their shape is a
// request's and an answer's bytes, every field set. See test/formats.
func TestFrameFormatIsItsVersion(t *testing.T) {
	req, err := Request{ContainerID: "c", Netns: "/n", IfName: "eth0", Args: "K=V", Path: "/opt/cni/bin",
		Stdin: []byte("{}"), Netlink: []string{"ipv4", "ipv6"}, Release: "1.8.9", Legacy: []string{"ipv6"}, Deadline: 0x0102030405060708}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := Response{Done: true, HandBack: "h", Stdout: []byte("o"), Stderr: []byte("e")}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	formats.Check(t, "handoff-frames", Version, "request "+hex.EncodeToString(req)+"\nresponse "+hex.EncodeToString(resp)+"\n")
}

// TestOlderFramesAreRefused: every frozen frame of an earlier version
// (version 2's request carries no Release: its families were 1.8.9's) is
// refused naming its version, never read as this version's.
func TestOlderFramesAreRefused(t *testing.T) {
	for v := 2; v < Version; v++ {
		golden, err := os.ReadFile(filepath.Join("testdata", "formats", "handoff-frames.v"+strconv.Itoa(v)+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(golden)) {
			kind, frame, _ := strings.Cut(strings.TrimSpace(line), " ")
			b, err := hex.DecodeString(frame)
			if err != nil {
				t.Fatalf("version %d's %s: %v", v, kind, err)
			}
			var ve *VersionError
			switch kind {
			case "request":
				err = new(Request).UnmarshalBinary(b)
			case "response":
				err = new(Response).UnmarshalBinary(b)
			default:
				t.Fatalf("version %d's golden holds a %q", v, kind)
			}
			if !errors.As(err, &ve) || ve.Got != v {
				t.Errorf("version %d's %s: %v, want refused as version %d", v, kind, err, v)
			}
		}
	}
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
