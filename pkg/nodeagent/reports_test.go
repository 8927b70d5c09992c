package nodeagent

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// TestPodNoteOncePerPod: the plugin's note on a pod whose IPv6 is captured
// by an IPv4-only proxy becomes one Normal Event on that pod, however many
// ADDs report it.
func TestPodNoteOncePerPod(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	n := podNotes{events: &Events{recorder: rec}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rep := reports.Report{Verb: "ADD", Pod: "team-a/web-1", PodUID: "uid-1", Note: reports.NoteIPv4OnlyProxy}
	for range 3 {
		n.tell(rep, rep.Note, log)
	}
	other := rep
	other.Pod, other.PodUID = "team-a/web-2", "uid-2"
	n.tell(other, other.Note, log)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "Normal "+ReasonIPv4OnlyProxy+" IPv6 egress is captured but the sidecar listens on IPv4 only") {
		t.Errorf("Events %q, want one per pod", got)
	}
}

// TestProxyEnvNotesOncePerPod: the plugin's note that ADD took proxy env
// vars set with valueFrom as unset, or a boolean setting that was not true
// or false as false, becomes one Warning Event on the pod naming them,
// beside the IPv6 note of the same report; a note this agent does not
// know is logged only.
func TestProxyEnvNotesOncePerPod(t *testing.T) {
	for _, tc := range []struct {
		note string
		want []string // the Events' prefixes
	}{
		{reports.NoteIPv4OnlyProxy + "," + reports.ProxyEnvNotRead([]string{"ISTIO_META_DNS_CAPTURE", "INVALID_DROP"}) + ",a-later-note",
			[]string{"Normal " + ReasonIPv4OnlyProxy + " ", "Warning " + ReasonProxyEnvNotRead + " istio-proxy sets ISTIO_META_DNS_CAPTURE, INVALID_DROP with valueFrom"}},
		{reports.ProxyEnvNotBool([]string{"ISTIO_DUAL_STACK", "INVALID_DROP"}),
			[]string{"Warning " + ReasonProxyEnvNotBool + " istio-proxy sets ISTIO_DUAL_STACK, INVALID_DROP to a value that is not true or false"}},
	} {
		rec := record.NewFakeRecorder(10)
		a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: install.NewMetrics(),
			notes: podNotes{events: &Events{recorder: rec}}}
		handle := a.reportHandler(nil)
		rep := reports.Report{Verb: "ADD", Pod: "team-a/web-1", PodUID: "uid-1", Note: tc.note}
		for range 3 {
			handle(rep)
		}
		close(rec.Events)
		var got []string
		for e := range rec.Events {
			got = append(got, e)
		}
		ok := len(got) == len(tc.want)
		for i := 0; ok && i < len(got); i++ {
			ok = strings.HasPrefix(got[i], tc.want[i])
		}
		if !ok {
			t.Errorf("note %q: Events %q, want one each of %q", tc.note, got, tc.want)
		}
	}
}

// The handler takes reports from the socket's loop and from every ADD the
// agent runs at once: notes, counts and wakes stay right. Enough reports
// that the runtime catches concurrent map writes without -race too.
func TestReportHandlerTakesReportsAtOnce(t *testing.T) {
	const goroutines, each = 8, 4000
	rec := record.NewFakeRecorder(goroutines * each)
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: install.NewMetrics(),
		notes: podNotes{events: &Events{recorder: rec}}}
	woken := make(chan string, goroutines*each)
	handle := a.reportHandler(func(uid string) { woken <- uid })
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			for j := range each {
				uid := fmt.Sprint("uid-", i*each+j)
				handle(reports.Report{Verb: "ADD", Pod: "team-a/" + uid, PodUID: uid, Note: reports.NoteIPv4OnlyProxy})
			}
		})
	}
	wg.Wait()
	if len(rec.Events) != goroutines*each || len(woken) != goroutines*each {
		t.Errorf("%d reports and %d wakes, want %d of each", len(rec.Events), len(woken), goroutines*each)
	}
}

// TestNodeNotices: a fight and another installer become Events on the
// agent's Node, naming the file and the other writer.
func TestNodeNotices(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	n := nodeNotices{events: &Events{recorder: rec}, node: "node-a"}
	f := install.Fight{File: "02-istio-cni.conflist", Writer: "deleted by another process", Repairs: 10, Window: 30 * time.Second}
	n.Fighting(f)
	n.Calm(f)
	n.OtherInstaller("10-calico.conflist")
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning " + ReasonConflict + " another writer keeps undoing 02-istio-cni.conflist (deleted by another process): 10 repairs in 30s",
		"Normal " + ReasonConflictOver + " no repair of 02-istio-cni.conflist needed for 30s",
		"Warning " + ReasonOtherInstaller + " upstream Istio's istio-cni is installed on this node too (its entry is in 10-calico.conflist)",
	}
	if len(got) != len(want) {
		t.Fatalf("reports %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("report %d: %q, want it to start with %q", i, got[i], want[i])
		}
	}
}
