package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// PreviousBuild is the commit whose build nodes run before an upgrade to
// the one under test, and after a rollback from it: the e2e's version-skew
// test rolls the DaemonSet between that build's image and this one's.
// Today it is be8eded, main before issue 44's work (the project has no
// release tags yet). It moves with each release: set it to the commit of
// the release before the one being made.
const PreviousBuild = "be8eded86c25697134287b35ddd04e0d7ac09ee2"

// PreviousImage is the reference the previous build's image carries: not
// the current image's (localhost/istio-cni/install-cni:0.1.0), so that
// both are on the node at once and a rollout between them changes the
// DaemonSet's image as an operator's upgrade or rollback does.
func PreviousImage(commit string) string {
	return "localhost/istio-cni/install-cni:prev-" + commit[:12]
}

// BuildPreviousImage builds the DaemonSet's image of a commit from the
// repository's history, as that commit's own Makefile builds it: its tree
// exported (git archive) into _output/prev/<commit>/src, then its
// `make image` there, which builds its four binaries (shim, full plugin,
// lookup helper, agent) statically with its GOFLAGS and writes the image
// with its own cmd/mkimage, tagged PreviousImage(commit) instead of the
// current image's reference. The build shares this machine's Go module and
// build caches, so only what changed since that commit compiles. The
// tarball is cached by commit: a second run returns it without building.
// A commit missing from the clone's history (a shallow clone) is an
// error that says so.
func BuildPreviousImage(ctx context.Context, commit string) (Build, error) {
	root, err := repoRoot()
	if err != nil {
		return Build{}, err
	}
	full, err := resolveCommit(ctx, root, commit)
	if err != nil {
		return Build{}, err
	}
	dir := filepath.Join(root, "_output", "prev", full)
	src := filepath.Join(dir, "src")
	b := Build{Ref: PreviousImage(full), Tarball: filepath.Join(src, "_output", "istio-cni-image.tar"), BinDir: filepath.Join(src, "_output", "bin")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Build{}, err
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return Build{}, err
	}
	defer unlock()
	if _, err := os.Stat(b.Tarball); err == nil {
		return b, nil // mkimage writes it atomically: there means complete
	}
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		if err := exportTree(ctx, root, full, dir); err != nil {
			return Build{}, err
		}
	}
	if out, err := runMake(ctx, src, "image", "IMAGE="+b.Ref, "VERSION="+full[:12]); err != nil {
		return Build{}, fmt.Errorf("building the image of %s (make image in %s): %w\n%s", full[:12], src, err, out)
	}
	return b, nil
}

// Build is a build's image and the binaries in it.
type Build struct {
	Ref     string // the image's reference
	Tarball string // its docker-archive, for ImportImages
	BinDir  string // its binaries: the shim, full plugin, lookup helper and agent
}

// The image's binaries: the agent's, and the plugin's two besides the
// shim, which the agent installs on the node.
var (
	agentBinaries  = []string{"install-cni"}
	pluginBinaries = []string{"istio-cni-full", "istio-cni-apilookup"}
)

// Shim is the file name of b's shim: istio-cni-sidecar, or istio-cni in
// builds from before it (upstream Istio's plugin's name).
func (b Build) Shim() string {
	if _, err := os.Stat(filepath.Join(b.BinDir, "istio-cni-sidecar")); err == nil {
		return "istio-cni-sidecar"
	}
	return "istio-cni"
}

// BuildMixedImage builds an image whose agent is agent's build and whose
// plugin binaries are plugin's, tagged ref, into dir: a node in the middle
// of a rollout between the two, the new agent answering the old shim (or
// the shim handing back to its own full plugin), held for as long as a
// test needs instead of a moment. The working tree's `make image` writes
// it, from those files.
func BuildMixedImage(ctx context.Context, agent, plugin Build, ref, dir string) (Build, error) {
	root, err := repoRoot()
	if err != nil {
		return Build{}, err
	}
	b := Build{Ref: ref, Tarball: filepath.Join(dir, "image.tar"), BinDir: filepath.Join(dir, "bin")}
	if err := os.MkdirAll(b.BinDir, 0o755); err != nil {
		return Build{}, err
	}
	// The shim goes in under the name the agent's build installs it by.
	shim := agent.Shim()
	args := []string{"image", "BIN=" + b.BinDir, "IMAGE=" + ref, "IMAGE_TAR=" + b.Tarball, "SHIM=" + shim}
	for _, f := range []struct {
		from  Build
		files []imageFile
	}{
		{agent, files(agentBinaries)},
		{plugin, append(files(pluginBinaries), imageFile{plugin.Shim(), shim})},
	} {
		for _, name := range f.files {
			data, err := os.ReadFile(filepath.Join(f.from.BinDir, name.from)) // #nosec G304 -- a build's output
			if err != nil {
				return Build{}, err
			}
			dst := filepath.Join(b.BinDir, name.to)
			if err := os.WriteFile(dst, data, 0o755); err != nil { // #nosec G306 -- an executable
				return Build{}, err
			}
			args = append(args, "--old-file="+dst) // the files given, never rebuilt from the tree
		}
	}
	if out, err := runMake(ctx, root, args...); err != nil {
		return Build{}, fmt.Errorf("building the mixed image %s: %w\n%s", ref, err, out)
	}
	return b, nil
}

// imageFile is a build's binary, from, put in an image as to.
type imageFile struct{ from, to string }

// files names each of names as itself.
func files(names []string) []imageFile {
	out := make([]imageFile, len(names))
	for i, n := range names {
		out[i] = imageFile{n, n}
	}
	return out
}

// runMake runs make in dir as its own make, not a sub-make of one that
// may run this test (make test): no inherited jobserver or flags.
func runMake(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory"}, args...)...) // #nosec G204 -- a tree's own Makefile
	cmd.Dir = dir
	cmd.Env = withoutMakeVars(os.Environ())
	return cmd.CombinedOutput()
}

// resolveCommit returns commit's full hash, or an error saying the clone
// lacks it.
func resolveCommit(ctx context.Context, root, commit string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--quiet", commit+"^{commit}").Output() // #nosec G204 -- a commit name
	if err != nil {
		return "", fmt.Errorf("commit %s (the previous build, cluster.PreviousBuild) is not in the history of the clone at %s: "+
			"fetch it (git fetch --unshallow, or git fetch origin %s) to run the version-skew test: %w", commit, root, commit, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// exportTree writes commit's tree into dir/src: git archive into a
// temporary directory, renamed into place once complete.
func exportTree(ctx context.Context, root, commit, dir string) error {
	tmp, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", commit) // #nosec G204 -- a resolved commit
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", tmp)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var archiveErr, untarErr strings.Builder
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("git archive %s: %w: %s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("tar -x of git archive %s: %w: %s", commit, err, untarErr.String())
	}
	return os.Rename(tmp, filepath.Join(dir, "src"))
}

// lockFile holds an exclusive lock on path until the returned func runs:
// two runs building one commit take turns.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600) // #nosec G304 -- under _output
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}

// withoutMakeVars is env less what a parent make passes its children.
func withoutMakeVars(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEFILES":
			continue
		}
		out = append(out, kv)
	}
	return out
}
