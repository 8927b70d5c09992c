package image

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// source writes a host file with the given content and returns its path.
func source(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func testSpec(t *testing.T) Spec {
	return Spec{
		Files: []File{
			{Path: "/install-cni", Source: source(t, "a", "installer"), Mode: 0o755},
			{Path: "/etc/istio/cni.conf", Source: source(t, "b", "conf"), Mode: 0o644},
			{Path: "/istio-cni", Source: source(t, "c", "plugin"), Mode: 0o755},
			{Path: "/etc/istio/ca/root.pem", Source: source(t, "d", "pem"), Mode: 0o600},
		},
		Links:      []Link{{Path: "/bin/install", Target: "../install-cni"}},
		Entrypoint: []string{"/install-cni", "--log-level=debug"},
	}
}

func build(t *testing.T, s Spec) v1.Image {
	t.Helper()
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// writeAndRead writes img to an archive under tag and loads it back.
func writeAndRead(t *testing.T, img v1.Image, tag string) (string, v1.Image) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteArchive(path, img, tag); err != nil {
		t.Fatal(err)
	}
	ref, err := ParseTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(path, &ref)
	if err != nil {
		t.Fatal(err)
	}
	return path, back
}

func TestBuildIsReproducible(t *testing.T) {
	s := testSpec(t)
	first := digest(t, build(t, s))

	// Same inputs in another order, after the sources' mtimes changed.
	again := Spec{Files: slices.Clone(s.Files), Links: s.Links, Entrypoint: s.Entrypoint}
	slices.Reverse(again.Files)
	for _, f := range again.Files {
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(f.Source, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if d := digest(t, build(t, again)); d != first {
		t.Errorf("second build: digest %s, first build %s", d, first)
	}

	// The digest does depend on the content.
	if err := os.WriteFile(s.Files[0].Source, []byte("other"), 0o600); err != nil {
		t.Fatal(err)
	}
	if d := digest(t, build(t, s)); d == first {
		t.Errorf("changed content: digest %s unchanged", d)
	}
}

type entry struct {
	name    string
	typ     byte
	mode    int64
	content string
}

func TestLayerEntries(t *testing.T) {
	_, img := writeAndRead(t, build(t, testSpec(t)), "istio-cni/install-cni:0.1.0")
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("have %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var have []entry
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: uid %d gid %d mtime %s, want 0 0 %s", h.Name, h.Uid, h.Gid, h.ModTime.UTC(), time.Unix(0, 0).UTC())
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeSymlink {
			b = []byte("-> " + h.Linkname)
		}
		have = append(have, entry{h.Name, h.Typeflag, h.Mode, string(b)})
	}
	want := []entry{
		{"bin/", tar.TypeDir, 0o755, ""},
		{"bin/install", tar.TypeSymlink, 0o777, "-> ../install-cni"},
		{"etc/", tar.TypeDir, 0o755, ""},
		{"etc/istio/", tar.TypeDir, 0o755, ""},
		{"etc/istio/ca/", tar.TypeDir, 0o755, ""},
		{"etc/istio/ca/root.pem", tar.TypeReg, 0o600, "pem"},
		{"etc/istio/cni.conf", tar.TypeReg, 0o644, "conf"},
		{"install-cni", tar.TypeReg, 0o755, "installer"},
		{"istio-cni", tar.TypeReg, 0o755, "plugin"},
	}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("layer entries:\nhave %+v\nwant %+v", have, want)
	}
}

func TestConfig(t *testing.T) {
	_, img := writeAndRead(t, build(t, testSpec(t)), "istio-cni/install-cni:0.1.0")
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/install-cni", "--log-level=debug"}; !slices.Equal(cfg.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", cfg.Config.Entrypoint, want)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	if !cfg.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("created %s, want the epoch", cfg.Created.UTC())
	}
	if len(cfg.RootFS.DiffIDs) != 1 || len(cfg.History) != 1 {
		t.Errorf("rootfs has %d diff IDs and %d history entries, want 1 each", len(cfg.RootFS.DiffIDs), len(cfg.History))
	}
}

// manifestEntry is one image in the archive's manifest.json, as docker load
// and ctr images import read it.
type manifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// readArchive returns the tar's entry names and its parsed manifest.json.
func readArchive(t *testing.T, path string) (map[string]bool, []manifestEntry) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	var m []manifestEntry
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, m
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
		if h.Name == "manifest.json" {
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestArchiveManifest(t *testing.T) {
	img := build(t, testSpec(t))
	path := filepath.Join(t.TempDir(), "image.tar")
	// A tag without ":TAG" is written as ":latest", which docker load needs.
	if err := WriteArchive(path, img, "istio-cni/install-cni:0.1.0", "localhost:5000/istio-cni/install-cni"); err != nil {
		t.Fatal(err)
	}
	names, m := readArchive(t, path)
	if len(m) != 1 {
		t.Fatalf("manifest.json has %d images, want 1: %+v", len(m), m)
	}
	tags := slices.Sorted(slices.Values(m[0].RepoTags))
	if want := []string{"istio-cni/install-cni:0.1.0", "localhost:5000/istio-cni/install-cni:latest"}; !slices.Equal(tags, want) {
		t.Errorf("RepoTags %q, want %q", tags, want)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if m[0].Config != cfgName.String() || !names[m[0].Config] {
		t.Errorf("Config %q, want %q present in the archive (entries %v)", m[0].Config, cfgName, names)
	}
	if len(m[0].Layers) != 1 || !names[m[0].Layers[0]] {
		t.Errorf("Layers %q, want one entry present in the archive (entries %v)", m[0].Layers, names)
	}
	for _, tag := range m[0].RepoTags {
		ref, err := ParseTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		back, err := tarball.ImageFromPath(path, &ref)
		if err != nil {
			t.Fatalf("loading %s: %v", tag, err)
		}
		if d := digest(t, back); d != digest(t, img) {
			t.Errorf("%s: digest %s, built %s", tag, d, digest(t, img))
		}
	}
}

func TestWriteArchiveReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(path, build(t, testSpec(t)), "istio-cni/pause:1"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "image.tar" {
		t.Errorf("directory holds %v, want only image.tar", entries)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("archive mode %v, want 0644", fi.Mode().Perm())
	}
	if names, _ := readArchive(t, path); !names["manifest.json"] {
		t.Errorf("archive entries %v, want manifest.json", names)
	}
}

func TestWriteArchiveErrors(t *testing.T) {
	img := build(t, testSpec(t))
	dir := t.TempDir()
	for _, tc := range []struct {
		name, path string
		tags       []string
		want       string
	}{
		{"no tag", filepath.Join(dir, "a.tar"), nil, "tags: want at least one, have none"},
		{"bad tag", filepath.Join(dir, "a.tar"), []string{"ok/name:1", "Istio/CNI:1"}, `tags[1]: tag "Istio/CNI:1": want [HOST[:PORT]/]REPOSITORY[:TAG], repository in lowercase`},
		{"empty tag after colon", filepath.Join(dir, "a.tar"), []string{"istio/cni:"}, `tags[0]: tag "istio/cni:"`},
		{"missing directory", filepath.Join(dir, "missing", "a.tar"), []string{"istio/cni:1"}, "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := WriteArchive(tc.path, img, tc.tags...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed writes left %v behind", entries)
	}
}

func TestBuildErrors(t *testing.T) {
	exe := source(t, "exe", "x")
	conf := source(t, "conf", "y")
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		spec Spec
		want string
	}{
		{"no files", Spec{Entrypoint: []string{"/x"}}, "files: want at least one file"},
		{"relative path", Spec{Files: []File{{Path: "bin/x", Source: exe}}}, `files[0].path "bin/x": want an absolute path`},
		{"unclean path", Spec{Files: []File{{Path: "/x", Source: exe}, {Path: "/a/../b", Source: exe}}}, `files[1].path "/a/../b": want a clean path`},
		{"trailing slash", Spec{Files: []File{{Path: "/a/", Source: exe}}}, `files[0].path "/a/": want a clean path`},
		{"root", Spec{Files: []File{{Path: "/", Source: exe}}}, `files[0].path "/": want a clean path below /`},
		{"no source", Spec{Files: []File{{Path: "/x"}}}, "files[0].source: want a host file, have none"},
		{"setuid", Spec{Files: []File{{Path: "/x", Source: exe, Mode: 0o755 | fs.ModeSetuid}}}, "files[0].mode 040000755: want permission bits only (0 to 0777)"},
		{"duplicate", Spec{Files: []File{{Path: "/x", Source: exe}, {Path: "/x", Source: conf}}}, `files[1].path "/x": already files[0].path`},
		{"file as parent", Spec{Files: []File{{Path: "/a/b", Source: exe}, {Path: "/a", Source: conf}}}, `files[0].path "/a/b": its parent directory is files[1].path`},
		{"no entrypoint", Spec{Files: []File{{Path: "/x", Source: exe, Mode: 0o755}}}, "entrypoint: want the program to run, have none"},
		{"entrypoint not a file", Spec{Files: []File{{Path: "/x", Source: exe}, {Path: "/a/y", Source: exe}}, Entrypoint: []string{"/z"}}, `entrypoint[0] "/z": want one of the files (/a/y, /x)`},
		{"entrypoint mode zero", Spec{Files: []File{{Path: "/x", Source: exe}}, Entrypoint: []string{"/x"}}, `entrypoint[0] "/x": files[0].mode 0: want an execute bit`},
		{"entrypoint not executable", Spec{Files: []File{{Path: "/x", Source: exe, Mode: 0o644}}, Entrypoint: []string{"/x"}}, `entrypoint[0] "/x": files[0].mode 0644: want an execute bit`},
		{"link path relative", Spec{Files: []File{{Path: "/x", Source: exe, Mode: 0o755}}, Links: []Link{{Path: "y", Target: "x"}}, Entrypoint: []string{"/x"}}, `links[0].path "y": want a clean absolute path below /`},
		{"link without target", Spec{Files: []File{{Path: "/x", Source: exe, Mode: 0o755}}, Links: []Link{{Path: "/y"}}, Entrypoint: []string{"/x"}}, "links[0].target: want what the link points at"},
		{"link over a file", Spec{Files: []File{{Path: "/x", Source: exe, Mode: 0o755}}, Links: []Link{{Path: "/x", Target: "y"}}, Entrypoint: []string{"/x"}}, `links[0].path "/x": already files[0].path`},
		{"link twice", Spec{Files: []File{{Path: "/x", Source: exe, Mode: 0o755}}, Links: []Link{{Path: "/y", Target: "x"}, {Path: "/y", Target: "z"}}, Entrypoint: []string{"/x"}}, `links[1].path "/y": already links[0].path`},
		{"link as parent", Spec{Files: []File{{Path: "/d/x", Source: exe, Mode: 0o755}}, Links: []Link{{Path: "/d", Target: "e"}}, Entrypoint: []string{"/d/x"}}, `files[0].path "/d/x": its parent directory is links[0].path`},
		{"source is a directory", Spec{Files: []File{{Path: "/x", Source: exe, Mode: 0o755}, {Path: "/d", Source: dir}}, Entrypoint: []string{"/x"}}, `files[1].source "` + dir + `": want a regular file, have a directory`},
		{"source is a device", Spec{Files: []File{{Path: "/x", Source: os.DevNull, Mode: 0o755}}, Entrypoint: []string{"/x"}}, `files[0].source "/dev/null": want a regular file, have file type Dc`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}

	// A missing source is an I/O error, not a spec error.
	_, err := Build(Spec{Files: []File{{Path: "/x", Source: filepath.Join(t.TempDir(), "gone"), Mode: 0o755}}, Entrypoint: []string{"/x"}})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "files[0].source") {
		t.Errorf("missing source: error %v, want files[0].source and ErrNotExist", err)
	}
}
