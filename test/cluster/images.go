package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"istio-cni.local/istio-cni/cmd/mkimage/image"
)

// TestImage is the image test pods run: /testproxy (proxy, server and
// client in one static binary), and /pause, its entrypoint, which also
// makes it the node's sandbox image (SandboxImage is its second tag).
const TestImage = "istio-cni-test/testproxy:1"

// BuildTestImage builds pause and testproxy statically and writes the test
// image's docker-archive tarball into dir.
func BuildTestImage(ctx context.Context, dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	var files []image.File
	for name, pkg := range map[string]string{"pause": "./test/pause", "testproxy": "./test/testproxy"} {
		out := filepath.Join(dir, name)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg) // #nosec G204 -- fixed packages
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building %s: %w\n%s", pkg, err, b)
		}
		files = append(files, image.File{Path: "/" + name, Source: out, Mode: 0o755})
	}
	img, err := image.Build(image.Spec{Files: files, Entrypoint: []string{"/pause"}})
	if err != nil {
		return "", err
	}
	tarball := filepath.Join(dir, "test-image.tar")
	return tarball, image.WriteArchive(tarball, img, TestImage, SandboxImage)
}

// BuildImages builds both images a node needs, the test image (into dir)
// and the product's (`make image`), and returns their tarballs.
func BuildImages(ctx context.Context, dir string) ([]string, error) {
	product, err := MakeImage(ctx)
	if err != nil {
		return nil, err
	}
	test, err := BuildTestImage(ctx, dir)
	if err != nil {
		return nil, err
	}
	return []string{test, product}, nil
}

// MakeImage runs `make image` in the repository, as a user builds the
// product's image, and returns the tarball's path.
func MakeImage(ctx context.Context) (string, error) {
	return makeTarball(ctx, "image", "istio-cni-image.tar")
}

// MakeImageIndex runs `make image-index`, the release's image for every
// architecture as one OCI index, and returns its OCI layout tarball. The
// other architecture's compile runs niced: under make test it fills the
// e2e's waits rather than slowing its steps.
func MakeImageIndex(ctx context.Context) (string, error) {
	return makeTarball(ctx, "image-index", "istio-cni-image-index.tar", "nice", "-n", "10")
}

// makeTarball runs `make target` in the repository (after the command
// prefix, if any) and returns the path of the tarball it writes under
// _output.
func makeTarball(ctx context.Context, target, tarball string, prefix ...string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	argv := append(prefix, "make", "--no-print-directory", target)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...) // #nosec G204 -- the Makefile's own targets
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make %s: %w\n%s", target, err, out)
	}
	return filepath.Join(root, "_output", tarball), nil
}

// DeploymentsDir is the repository's deployments/ directory.
func DeploymentsDir() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "deployments"), nil
}

// MakeUpstreamCNIImage runs `make upstream-cni-image`: upstream Istio's
// istio-cni installer image (UpstreamCNIImage), built from the module
// test/upstream pins, and returns the tarball's path.
func MakeUpstreamCNIImage(ctx context.Context) (string, error) {
	return makeTarball(ctx, "upstream-cni-image", "upstream-cni-image.tar")
}
