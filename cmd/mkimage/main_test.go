package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-o", out, "-tag", "istio-cni/pause:1", "-entrypoint", "/pause", "-entrypoint", "-v", "-file", "/pause=" + bin, "-file", "/etc/conf=" + bin + ":0640"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, &stderr)
	}
	tag, err := name.NewTag("istio-cni/pause:1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/pause", "-v"}; !slices.Equal(cfg.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", cfg.Config.Entrypoint, want)
	}
	id, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(stdout.String()); got != id.String() {
		t.Errorf("printed %q, want the image ID %s", got, id)
	}
}

// An image that carries a dynamic program: its libraries come along, a
// directory's files keep their modes, and links are links.
func TestRunLibrariesDirLink(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this host")
	}
	sh, _ = filepath.EvalSymlinks(sh)
	mods := t.TempDir()
	if err := os.WriteFile(filepath.Join(mods, "a.so"), []byte("module"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-o", out, "-tag", "istio-cni/sh:1", "-entrypoint", "/bin/sh", "-libraries",
		"-file", "/bin/sh=" + sh, "-dir", "/usr/lib/mods=" + mods, "-link", "/bin/ash=sh"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, &stderr)
	}
	tag, _ := name.NewTag("istio-cni/sh:1")
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	have := map[string]string{}
	tr := tar.NewReader(rc)
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		have[h.Name] = fmt.Sprintf("%c %o %s", h.Typeflag, h.Mode, h.Linkname)
	}
	libc := false
	for n := range have {
		libc = libc || strings.Contains(n, "/libc.so")
	}
	if !libc || have["usr/lib/mods/a.so"] != "0 644 " || have["bin/ash"] != "2 777 sh" {
		t.Errorf("layer %v: want libc, usr/lib/mods/a.so 0644 and bin/ash -> sh", have)
	}
}

func TestRunErrors(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	ok := []string{"-o", out, "-tag", "istio-cni/pause:1", "-entrypoint", "/pause"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no -o", []string{"-tag", "a:1", "-entrypoint", "/p", "-file", "/p=" + bin}, 2, "-o: want the path of the tarball to write"},
		{"no -tag", []string{"-o", out, "-entrypoint", "/p", "-file", "/p=" + bin}, 2, "-tag: want at least one image name"},
		{"no -file", []string{"-o", out, "-tag", "a:1", "-entrypoint", "/p"}, 2, "-file: want at least one IMAGEPATH=HOSTPATH[:MODE]"},
		{"no -entrypoint", []string{"-o", out, "-tag", "a:1", "-file", "/p=" + bin}, 2, "-entrypoint: want the program to run"},
		{"argument", append(slices.Clone(ok), "-file", "/pause="+bin, "extra"), 2, `unexpected argument "extra"`},
		{"bad tag", []string{"-tag", "A:1"}, 2, `invalid value "A:1" for flag -tag: tag "A:1": want [HOST[:PORT]/]REPOSITORY[:TAG]`},
		{"file without =", append(slices.Clone(ok), "-file", "/pause"), 2, `invalid value "/pause" for flag -file: want IMAGEPATH=HOSTPATH[:MODE]`},
		{"bad mode", append(slices.Clone(ok), "-file", "/pause="+bin+":755x"), 2, `for flag -file: MODE "755x": want octal permission bits, 0 to 0777`},
		{"mode too big", append(slices.Clone(ok), "-file", "/pause="+bin+":4755"), 2, `MODE "4755": want octal permission bits`},
		{"no host path", append(slices.Clone(ok), "-file", "/pause=:0755"), 2, "have no HOSTPATH"},
		{"relative image path", append(slices.Clone(ok), "-file", "pause="+bin), 2, `files[0].path "pause": want an absolute path`},
		{"missing host file", append(slices.Clone(ok), "-file", "/pause="+bin+".gone"), 1, "files[0].source"},
		{"link without =", append(slices.Clone(ok), "-file", "/pause="+bin, "-link", "/x"), 2, `invalid value "/x" for flag -link: want IMAGEPATH=TARGET`},
		{"bad link path", append(slices.Clone(ok), "-file", "/pause="+bin, "-link", "x=pause"), 2, `links[0].path "x": want a clean absolute path`},
		{"dir without =", append(slices.Clone(ok), "-file", "/pause="+bin, "-dir", "/x"), 2, `for flag -dir: want IMAGEDIR=HOSTDIR`},
		{"missing dir", append(slices.Clone(ok), "-file", "/pause="+bin, "-dir", "/x="+bin+".gone"), 2, `for flag -dir: open ` + bin + `.gone`},
		{"empty dir", append(slices.Clone(ok), "-file", "/pause="+bin, "-dir", "/x="+t.TempDir()), 2, `holds no files`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, &stderr, tc.code, tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", &stdout)
			}
		})
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("failed runs wrote %s (stat: %v)", out, err)
	}
}
