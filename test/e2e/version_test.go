package e2e

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestVersionMatchesImage: the image's version label, what the image's
// own `install-cni version` prints and what the running agent exports are
// one version.
func TestVersionMatchesImage(t *testing.T) {
	img, err := tarball.ImageFromPath(env.image, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	version := cfg.Config.Labels["org.opencontainers.image.version"]
	if version == "" {
		t.Fatalf("the image's labels %v: no org.opencontainers.image.version", cfg.Config.Labels)
	}
	bin := imageFile(t, img, "install-cni")
	out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "install-cni "+version+" (") {
		t.Errorf("the image's install-cni version: %v %q, want its label's %s", err, out, version)
	}
	exported := ""
	for line := range strings.Lines(scrape(t)) {
		if strings.HasPrefix(line, "istio_cni_build_info{") {
			exported = strings.TrimSpace(line)
		}
	}
	if !strings.Contains(exported, `version="`+version+`"`) || !strings.HasSuffix(exported, " 1") {
		t.Errorf("the agent exports %q, want istio_cni_build_info{version=%q} 1", exported, version)
	}
}

// imageFile copies one file of the image's layers out, executable, and
// returns its path.
func imageFile(t *testing.T, img v1.Image, name string) string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name != name {
				continue
			}
			dst := filepath.Join(t.TempDir(), filepath.Base(name))
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o700) // #nosec G304 -- the test's own directory
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(f, tr) // #nosec G110 -- the build's own image
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			_ = rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			return dst
		}
		_ = rc.Close()
	}
	t.Fatalf("no /%s in the image", name)
	return ""
}
