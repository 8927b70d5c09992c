package nodeagent

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/agentevents"
)

// TestPodNoteOncePerPod: the plugin's note on a pod whose IPv6 is captured
// by an IPv4-only proxy becomes one Normal Event on that pod, however many
// ADDs report it.
func TestPodNoteOncePerPod(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	n := podNotes{events: &Events{recorder: rec}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ev := agentevents.Event{Verb: "ADD", Pod: "team-a/web-1", PodUID: "uid-1", Note: agentevents.NoteIPv4OnlyProxy}
	for range 3 {
		n.tell(ev, log)
	}
	other := ev
	other.Pod, other.PodUID = "team-a/web-2", "uid-2"
	n.tell(other, log)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "Normal "+ReasonIPv4OnlyProxy+" IPv6 egress is captured but the sidecar listens on IPv4 only") {
		t.Errorf("events %q, want one per pod", got)
	}
}
