// Package image builds small container images from host files (static
// binaries on an empty base) and writes them as docker-archive tarballs,
// the format both "docker load" and "ctr images import" read. It needs no
// container engine and no registry.
package image

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// ErrInvalid is wrapped by every error that comes from a bad Spec, as opposed
// to an I/O failure.
var ErrInvalid = errors.New("invalid image spec")

// File is one host file copied into the image.
type File struct {
	// Path is the absolute, clean path in the image, e.g. /install-cni.
	Path string
	// Source is the host file; it must be a regular file (a symlink to one
	// is followed).
	Source string
	// Mode is the permission bits in the image.
	Mode fs.FileMode
}

// Link is a symbolic link in the image, such as the names a multi-call
// binary answers to.
type Link struct {
	// Path is the absolute, clean path of the link in the image.
	Path string
	// Target is what the link points at, as ln -s takes it (relative to
	// the link's directory, or absolute inside the image).
	Target string
}

// Spec is an image: one layer holding Files and Links, run as Entrypoint.
type Spec struct {
	Files []File
	Links []Link
	// Entrypoint[0] must be one of Files: the image holds nothing else.
	Entrypoint []string
	// Arch is the GOARCH the files are built for; "" is this machine's.
	Arch string
	// Labels are the config's labels (org.opencontainers.image.*).
	Labels map[string]string
}

// epoch is every timestamp in the image (layer entries, config, history),
// so the same inputs always give the same digest.
var epoch = time.Unix(0, 0).UTC()

// Build makes the image for s on linux/s.Arch, the platform the binaries
// are built for. The same Spec and file contents always give the
// same image digest (for a given Go toolchain, which does the gzip).
func Build(s Spec) (v1.Image, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	layer, err := buildLayer(s.Files, s.Links)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "istio-cni cmd/mkimage/image"},
	})
	if err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	base, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	cfg := base.DeepCopy()
	// Runtimes pick an image by these fields; a wrong arch fails at run time.
	cfg.OS = "linux"
	cfg.Architecture = cmp.Or(s.Arch, runtime.GOARCH)
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = append([]string(nil), s.Entrypoint...)
	cfg.Config.Labels = maps.Clone(s.Labels)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	return img, nil
}
