package handoff

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
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

// TestOlderFramesAreRead: every frozen frame of an earlier version this
// build reads decodes, so a rollout or a rollback that mixes two builds
// on a node still hands off: version 2's request names no release (its
// families are 1.8.9's) and no legacy family.
func TestOlderFramesAreRead(t *testing.T) {
	for v := oldestVersion; v < Version; v++ {
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
			switch kind {
			case "request":
				var r Request
				if err := r.UnmarshalBinary(b); err != nil || r.Release != "1.8.9" || len(r.Legacy) != 0 || !slices.Equal(r.Netlink, []string{"ipv4", "ipv6"}) {
					t.Errorf("version %d's request: %+v, %v; want read, 1.8.9's", v, r, err)
				}
				// And written so again: the oldest version that says it.
				if again, err := r.MarshalBinary(); err != nil || !bytes.Equal(again, b) {
					t.Errorf("version %d's request written again: %x, %v; want its own frame", v, again, err)
				}
			case "response":
				var r Response
				if err := r.UnmarshalBinary(b); err != nil || !r.Done {
					t.Errorf("version %d's response: %+v, %v", v, r, err)
				}
			default:
				t.Fatalf("version %d's golden holds a %q", v, kind)
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
	b[len(Magic)+1] = Version + 1 // the version's low byte
	var ve *VersionError
	if err := new(Request).UnmarshalBinary(b); !errors.As(err, &ve) || !strings.Contains(err.Error(), "version") {
		t.Errorf("a newer request frame: %v", err)
	}
	b, err = Response{Done: true}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b[len(Magic)+1] = Version + 1
	if err := new(Response).UnmarshalBinary(b); !errors.As(err, &ve) {
		t.Errorf("a newer response frame: %v", err)
	}
}
