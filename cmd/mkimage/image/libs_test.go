package image

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

func hostTriplet() string {
	if runtime.GOARCH == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// The closure is complete when the program runs in a root holding nothing
// else: copy it there and run it chrooted.
func TestWithLibrariesRunsAlone(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this host")
	}
	sh, _ = filepath.EvalSymlinks(sh)
	files, err := WithLibraries([]File{{Path: "/bin/sh", Source: sh, Mode: 0o755}}, "", LibraryDirs(hostTriplet()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Path)
	}
	if len(files) < 3 || !strings.Contains(strings.Join(names, " "), "libc.so") {
		t.Fatalf("closure of %s: %v, want the interpreter and libc at least", sh, names)
	}
	if os.Geteuid() != 0 {
		t.Skip("running it chrooted needs root")
	}
	root := t.TempDir()
	for _, f := range files {
		copyFile(t, f.Source, filepath.Join(root, f.Path), f.Mode)
	}
	cmd := exec.Command("/bin/sh", "-c", "echo alone")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "alone\n" {
		t.Errorf("%s in a root holding only %v: %q, %v", sh, names, out, err)
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
}

func TestWithLibrariesErrors(t *testing.T) {
	text := source(t, "conf", "not a program")
	files, err := WithLibraries([]File{{Path: "/etc/conf", Source: text, Mode: 0o644}}, "", nil)
	if err != nil || len(files) != 1 {
		t.Errorf("a file that is not ELF: %v, %v; want it alone", files, err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this host")
	}
	_, err = WithLibraries([]File{{Path: "/etc/conf", Source: text}, {Path: "/bin/sh", Source: sh}}, "", []string{t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "files[1] ("+sh+") needs libc.so.6: not found in") {
		t.Errorf("no library directory holding libc: %v, want the file and the library named", err)
	}
}
