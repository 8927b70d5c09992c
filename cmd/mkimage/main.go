// Command mkimage builds a container image from host files and writes it as
// a docker-archive tarball for "docker load" or "ctr images import". It is
// a build tool for the test cluster and releases, not part of the product,
// and needs neither a container engine nor a registry.
//
//	mkimage -o _output/install-cni.tar -tag localhost/istio-cni/install-cni:0.1.0 \
//	    -entrypoint /install-cni \
//	    -file /install-cni=_output/bin/install-cni \
//	    -file /istio-cni-sidecar=_output/bin/istio-cni-sidecar
//
// Flags:
//
//	-o PATH          the tarball to write (required); replaced atomically
//	-tag REF         the image's name, repeatable, at least one
//	-entrypoint ARG  one entrypoint element per flag, in order (so an
//	                 argument may hold commas); the first must be the
//	                 IMAGEPATH of a -file
//	-file IMAGEPATH=HOSTPATH[:MODE]
//	                 copy HOSTPATH to IMAGEPATH, repeatable, at least one;
//	                 MODE is octal, default 0755. The text after the last
//	                 ":" is the MODE, so a HOSTPATH holding ":" needs one.
//	-dir IMAGEDIR=HOSTDIR
//	                 copy every file directly in HOSTDIR (symlinks
//	                 followed) into IMAGEDIR with its host permissions
//	-link IMAGEPATH=TARGET
//	                 a symbolic link, repeatable (a multi-call binary's names)
//	-libraries       add the interpreter and shared libraries every ELF
//	                 file needs, at the paths the image's loader searches
//	                 (the Debian multiarch directories of this build's arch)
//
// It prints the image ID (the config digest, as "docker images" and crictl
// show it). In errors, files[i] is the i-th -file flag, from 0. Exit status
// is 2 for bad flags or an invalid image, 1 for other failures.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"istio-cni.local/istio-cni/cmd/mkimage/image"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	out, tags, spec, err := parseFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlagSyntax):
		return 2
	case err != nil:
		return fail(stderr, err, 2)
	}
	id, err := write(out, tags, spec)
	switch {
	case errors.Is(err, image.ErrInvalid):
		return fail(stderr, err, 2)
	case err != nil:
		return fail(stderr, err, 1)
	}
	if _, err := fmt.Fprintln(stdout, id); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// buildSpec is the image as the flags describe it, before -libraries adds
// the shared libraries (reading the files, so an I/O step).
type buildSpec struct {
	image.Spec
	Libraries bool
}

// write builds the image, writes the archive and returns the image ID.
func write(out string, tags []string, spec buildSpec) (v1.Hash, error) {
	if spec.Libraries {
		files, err := image.WithLibraries(spec.Files, image.LibraryDirs(multiarch[runtime.GOARCH]))
		if err != nil {
			return v1.Hash{}, fmt.Errorf("-libraries: %w", err)
		}
		spec.Files = files
	}
	img, err := image.Build(spec.Spec)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := image.WriteArchive(out, img, tags...); err != nil {
		return v1.Hash{}, err
	}
	return img.ConfigName()
}

func fail(stderr io.Writer, err error, code int) int {
	_, _ = fmt.Fprintln(stderr, "mkimage:", err)
	return code
}

// parseFlags reports flag syntax errors itself (with the usage) and returns
// them as errFlagSyntax, which run does not print again.
func parseFlags(args []string, stderr io.Writer) (out string, tags []string, spec buildSpec, err error) {
	fl := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&out, "o", "", "the tarball to write (required)")
	fl.Func("tag", "image name REF, repeatable, at least one", func(s string) error {
		if _, err := image.ParseTag(s); err != nil {
			return err
		}
		tags = append(tags, s)
		return nil
	})
	fl.Func("entrypoint", "one entrypoint element per flag, in order; the first is a -file's IMAGEPATH", func(s string) error {
		spec.Entrypoint = append(spec.Entrypoint, s)
		return nil
	})
	fl.Func("file", "IMAGEPATH=HOSTPATH[:MODE], repeatable; MODE octal, default 0755", func(s string) error {
		f, err := parseFile(s)
		if err != nil {
			return err
		}
		spec.Files = append(spec.Files, f)
		return nil
	})
	fl.Func("dir", "IMAGEDIR=HOSTDIR: every file directly in HOSTDIR, with its host permissions", func(s string) error {
		files, err := dirFiles(s)
		if err != nil {
			return err
		}
		spec.Files = append(spec.Files, files...)
		return nil
	})
	fl.Func("link", "IMAGEPATH=TARGET: a symbolic link, repeatable", func(s string) error {
		p, target, ok := strings.Cut(s, "=")
		if !ok || p == "" || target == "" {
			return errors.New("want IMAGEPATH=TARGET")
		}
		spec.Links = append(spec.Links, image.Link{Path: p, Target: target})
		return nil
	})
	libraries := fl.Bool("libraries", false, "add every ELF file's interpreter and shared libraries")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", nil, spec, err
		}
		return "", nil, spec, errFlagSyntax
	}
	switch {
	case fl.NArg() > 0:
		return "", nil, spec, fmt.Errorf("unexpected argument %q: want flags only", fl.Arg(0))
	case out == "":
		return "", nil, spec, errors.New("-o: want the path of the tarball to write, have none")
	case len(tags) == 0:
		return "", nil, spec, errors.New("-tag: want at least one image name, such as localhost/istio-cni/install-cni:0.1.0")
	case len(spec.Files) == 0:
		return "", nil, spec, errors.New("-file: want at least one IMAGEPATH=HOSTPATH[:MODE]")
	case len(spec.Entrypoint) == 0:
		return "", nil, spec, errors.New("-entrypoint: want the program to run, the IMAGEPATH of a -file")
	}
	spec.Libraries = *libraries
	return out, tags, spec, nil
}

var errFlagSyntax = errors.New("bad flag syntax")

// multiarch is Debian's library triplet for each architecture built.
var multiarch = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// dirFiles lists HOSTDIR's files (not its subdirectories) as image files.
func dirFiles(s string) ([]image.File, error) {
	dst, src, ok := strings.Cut(s, "=")
	if !ok || dst == "" || src == "" {
		return nil, errors.New("want IMAGEDIR=HOSTDIR")
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil, err
	}
	var files []image.File
	for _, e := range entries {
		host := filepath.Join(src, e.Name())
		st, err := os.Stat(host)
		if err != nil {
			return nil, err
		}
		if st.Mode().IsRegular() {
			files = append(files, image.File{Path: path.Join(dst, e.Name()), Source: host, Mode: st.Mode().Perm()})
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no files", src)
	}
	return files, nil
}

// parseFile parses IMAGEPATH=HOSTPATH[:MODE]; image.Build checks the paths.
func parseFile(s string) (image.File, error) {
	dst, src, ok := strings.Cut(s, "=")
	if !ok || dst == "" || src == "" {
		return image.File{}, errors.New("want IMAGEPATH=HOSTPATH[:MODE]")
	}
	f := image.File{Path: dst, Source: src, Mode: 0o755}
	if i := strings.LastIndex(src, ":"); i >= 0 {
		m, err := strconv.ParseUint(src[i+1:], 8, 32)
		if err != nil || m > 0o777 {
			return image.File{}, fmt.Errorf("MODE %q: want octal permission bits, 0 to 0777 (a HOSTPATH holding \":\" needs a MODE)", src[i+1:])
		}
		f.Source, f.Mode = src[:i], fs.FileMode(m)
	}
	if f.Source == "" {
		return image.File{}, errors.New("want IMAGEPATH=HOSTPATH[:MODE], have no HOSTPATH")
	}
	return f, nil
}
