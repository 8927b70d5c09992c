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
//	                 (the Debian multiarch directories of -arch), from -root
//	-arch GOARCH     the architecture the files are built for (amd64,
//	                 arm64); default this machine's
//	-root DIR        Debian packages unpacked for -arch
//	                 (build/debian/fetch.sh): where -libraries looks, and
//	                 with -sbom, each package's control paragraph and
//	                 copyright file go into the image
//	-label KEY=VALUE a config label, repeatable
//	-sbom IMAGEPATH  an SPDX 2.3 JSON SBOM at IMAGEPATH: -root's packages
//	                 (as -distro, e.g. debian-12) and the Go modules the
//	                 image's Go binaries link; needs -name and -version
//	-go-licenses IMAGEDIR=MODCACHE
//	                 each such module's licence and notice files, from the
//	                 module cache MODCACHE, under IMAGEDIR/PATH@VERSION/
//
//	mkimage -index -o OUT -tag REF ARCHIVE...
//
// writes the per-architecture archives as one OCI image index, named REF,
// in an OCI layout tarball.
//
// It prints the image ID (the config digest, as "docker images" and crictl
// show it). In errors, files[i] is the i-th -file flag, from 0. Exit status
// is 2 for bad flags or an invalid image, 1 for other failures.
package main

import (
	"cmp"
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
	if len(args) > 0 && args[0] == "-index" {
		return runIndex(args[1:], stderr)
	}
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

// runIndex is mkimage -index.
func runIndex(args []string, stderr io.Writer) int {
	fl := flag.NewFlagSet("mkimage -index", flag.ContinueOnError)
	fl.SetOutput(stderr)
	out := fl.String("o", "", "the OCI layout tarball to write (required)")
	tag := fl.String("tag", "", "the index's name REF (required)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	switch {
	case *out == "":
		return fail(stderr, errors.New("-index -o: want the path of the tarball to write, have none"), 2)
	case *tag == "":
		return fail(stderr, errors.New("-index -tag: want the index's name, such as localhost/istio-cni/install-cni:0.1.0"), 2)
	case fl.NArg() == 0:
		return fail(stderr, errors.New("-index: want the per-architecture archives to put in it, have none"), 2)
	}
	err := image.WriteIndex(*out, *tag, fl.Args())
	switch {
	case errors.Is(err, image.ErrInvalid):
		return fail(stderr, err, 2)
	case err != nil:
		return fail(stderr, err, 1)
	}
	return 0
}

// buildSpec is the image as the flags describe it, before -libraries adds
// the shared libraries and -sbom what it lists (reading the files, so an
// I/O step).
type buildSpec struct {
	image.Spec
	Libraries bool
	// Root holds the Debian packages unpacked for Spec.Arch.
	Root string
	// SBOM is the SBOM's path in the image, "" for none.
	SBOM, Name, Version, Distro string
	// Licenses is the image directory for the Go modules' licences and
	// ModCache the module cache they are read from.
	Licenses, ModCache string
}

// write builds the image, writes the archive and returns the image ID.
func write(out string, tags []string, spec buildSpec) (v1.Hash, error) {
	if spec.Libraries {
		files, err := image.WithLibraries(spec.Files, spec.Root, image.LibraryDirs(multiarch[cmp.Or(spec.Arch, runtime.GOARCH)]))
		if err != nil {
			return v1.Hash{}, fmt.Errorf("-libraries: %w", err)
		}
		spec.Files = files
	}
	tmp, err := os.MkdirTemp("", "mkimage-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := addInventory(&spec, tmp); err != nil {
		return v1.Hash{}, err
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

// addInventory adds what -sbom and -go-licenses ask for: the packages'
// control paragraphs and copyright files, the modules' licences, and the
// SBOM listing both (written in tmp).
func addInventory(spec *buildSpec, tmp string) error {
	if spec.SBOM == "" && spec.Licenses == "" {
		return nil
	}
	goVersion, mods, err := image.GoModules(spec.Files)
	if err != nil {
		return err
	}
	if spec.Licenses != "" {
		files, err := image.GoLicenses(spec.ModCache, spec.Licenses, mods)
		if err != nil {
			return fmt.Errorf("-go-licenses: %w", err)
		}
		spec.Files = append(spec.Files, files...)
	}
	if spec.SBOM == "" {
		return nil
	}
	var pkgs []image.Package
	if spec.Root != "" {
		var files []image.File
		if pkgs, files, err = image.DebianPackages(spec.Root); err != nil {
			return fmt.Errorf("-root: %w", err)
		}
		spec.Files = append(spec.Files, files...)
	}
	doc, err := image.SBOM{Name: spec.Name, Version: spec.Version, Arch: cmp.Or(spec.Arch, runtime.GOARCH), Distro: spec.Distro,
		GoVersion: goVersion, Debian: pkgs, Go: mods}.SPDX()
	if err != nil {
		return err
	}
	src := filepath.Join(tmp, "sbom.spdx.json")
	if err := os.WriteFile(src, doc, 0o600); err != nil {
		return err
	}
	spec.Files = append(spec.Files, image.File{Path: spec.SBOM, Source: src, Mode: 0o644})
	return nil
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
	fl.Func("arch", "GOARCH the files are built for: amd64 or arm64 (default this machine's)", func(s string) error {
		if _, ok := multiarch[s]; !ok {
			return fmt.Errorf("want amd64 or arm64, have %q", s)
		}
		spec.Arch = s
		return nil
	})
	fl.StringVar(&spec.Root, "root", "", "Debian packages unpacked for -arch (build/debian/fetch.sh)")
	fl.Func("label", "KEY=VALUE: a config label, repeatable", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return errors.New("want KEY=VALUE")
		}
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[k] = v
		return nil
	})
	fl.StringVar(&spec.SBOM, "sbom", "", "IMAGEPATH of an SPDX 2.3 JSON SBOM")
	fl.StringVar(&spec.Name, "name", "", "the image's name in the SBOM")
	fl.StringVar(&spec.Version, "version", "", "the image's version in the SBOM")
	fl.StringVar(&spec.Distro, "distro", "", "the Debian release of -root's packages, as purls name it (debian-12)")
	fl.Func("go-licenses", "IMAGEDIR=MODCACHE: the Go modules' licence files under IMAGEDIR", func(s string) error {
		dir, cache, ok := strings.Cut(s, "=")
		if !ok || dir == "" || cache == "" {
			return errors.New("want IMAGEDIR=MODCACHE")
		}
		spec.Licenses, spec.ModCache = dir, cache
		return nil
	})
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
	case spec.SBOM != "" && (spec.Name == "" || spec.Version == ""):
		return "", nil, spec, errors.New("-sbom: want -name and -version, what the SBOM describes")
	case spec.SBOM != "" && spec.Root != "" && spec.Distro == "":
		return "", nil, spec, errors.New("-sbom with -root: want -distro, the packages' Debian release as purls name it (debian-12)")
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
