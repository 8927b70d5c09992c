package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"istio-cni.local/istio-cni/pkg/pluginconf"
	"istio-cni.local/istio-cni/pkg/version"
)

// log_file stays bounded: past the limit it moves to log_file.1 once,
// even when invocations race, and no invocation's line is lost. An
// invocation that opened the old file and found the rotation's lock taken
// appends to the file it opened (an ADD never waits on the lock), so its
// line may land in log_file.1, after the old lines.
func TestLogFileRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "istio-cni.log")
	old := strings.Repeat("old line\n", 20)
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	const limit, n = 150, 8 // the old file (180 bytes) is past it, 8 new lines are not
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f, err := openLogFile(path, limit)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = fmt.Fprintf(f, "invocation %d\n", i)
			_ = f.Close()
		})
	}
	close(start)
	wg.Wait()
	rotated, err := os.ReadFile(path + ".1")
	if err != nil || !strings.HasPrefix(string(rotated), old) {
		t.Fatalf("log_file.1 %q, %v; want the old file, rotated once", rotated, err)
	}
	current, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The rotating invocation writes to the new file, at least.
	if strings.Contains(string(current), "old line") || !strings.Contains(string(current), "invocation ") {
		t.Errorf("log_file after the rotation: %q; want new lines only, at least one", current)
	}
	// Every line is in one file or the other, once; nothing else is.
	lines := slices.Concat(strings.Split(strings.TrimPrefix(string(rotated), old), "\n"), strings.Split(string(current), "\n"))
	lines = slices.DeleteFunc(lines, func(l string) bool { return l == "" })
	slices.Sort(lines)
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("invocation %d", i))
	}
	if !slices.Equal(lines, want) {
		t.Errorf("new lines across log_file and log_file.1: %q, want %q", lines, want)
	}
	// Under the limit: appended, not rotated.
	f, err := openLogFile(path, limit)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("more\n")
	_ = f.Close()
	if got, _ := os.ReadFile(path + ".1"); string(got) != string(rotated) {
		t.Error("rotated again under the limit")
	}
}

// A symlink planted at log_file is not followed.
func TestLogFileRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "istio-cni.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if f, err := openLogFile(link, MaxLogFileSize); err == nil {
		_ = f.Close()
		t.Error("opened a symlinked log_file")
	}
}

// The log's directory is the installer's: after the uninstall removed it,
// an invocation logs to stderr only and creates nothing.
func TestLogFileNeverMakesItsDirectory(t *testing.T) {
	parent := t.TempDir()
	if f, err := openLogFile(filepath.Join(parent, "log", "istio-cni.log"), MaxLogFileSize); err == nil {
		_ = f.Close()
		t.Error("opened a log_file whose directory is gone")
	}
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Errorf("made %v", left)
	}
}

// Every line the plugin logs names its build, the warning that log_file
// cannot be opened included: an operator reading the node's log knows
// which build wrote each line, across an upgrade.
func TestLogLinesNameTheBuild(t *testing.T) {
	var stderr bytes.Buffer
	conf := &Config{Entry: pluginconf.Entry{LogFile: filepath.Join(t.TempDir(), "gone", "istio-cni.log")}}
	log, closeLog := newLogger(conf, &stderr)
	log.Info("ADD")
	closeLog()
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("log: %q; want the log_file warning and one line", stderr.String())
	}
	for _, l := range lines {
		var fields struct{ Plugin, Version string }
		if err := json.Unmarshal([]byte(l), &fields); err != nil || fields.Plugin != "istio-cni" || fields.Version != version.Get() {
			t.Errorf("log line %s (%v): want plugin istio-cni, version %q", l, err, version.Get())
		}
	}
}

// BenchmarkLogFile: what log_file adds to a verb: one open (and stat),
// one JSON line appended, one close.
func BenchmarkLogFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "istio-cni.log")
	for b.Loop() {
		f, err := openLogFile(path, MaxLogFileSize)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = f.WriteString(`{"time":"2026-11-24T15:00:00Z","level":"INFO","msg":"ADD","plugin":"istio-cni","pod":"default/x"}` + "\n")
		_ = f.Close()
	}
}
