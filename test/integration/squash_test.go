//go:build integration

/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
)

// scanImage unpacks every layer of a pushed image, read from the registry,
// with containerd's own applier, and describes the result (scanTree).
func (e *testEnv) scanImage(t *testing.T, ctx context.Context, ref string) map[string]string {
	t.Helper()
	layers, err := remoteImage(t, ref).Layers()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		_, err = archive.Apply(ctx, dir, rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s: applying layer %d: %v", ref, i, err)
		}
	}
	return scanTree(t, dir)
}

// squashChanges are the changes of successive pauses of one sandbox, each
// undoing, replacing or hardlinking what earlier ones wrote.
var squashChanges = []func(t *testing.T, root string){
	changeEverything,
	func(t *testing.T, root string) {
		p := func(n string) string { return filepath.Join(root, n) }
		// new/h1 and new/h2 are one file in the layer below: the write
		// copies new/h1 up alone, and new/h2 keeps the old content.
		mustDo(t, os.WriteFile(p("new/h1"), []byte("hard, rewritten"), 0o644))
		mustDo(t, os.RemoveAll(p("new/sub")))
		mustDo(t, os.MkdirAll(p("new/sub"), 0o755))
		mustDo(t, os.WriteFile(p("new/sub/c.txt"), []byte("c"), 0o644))
		mustDo(t, os.Remove(p("keep/mod.txt")))
		mustDo(t, os.Remove(p("new/a.txt")))
		mustDo(t, unix.Setxattr(p("keep/a-link"), "user.note2", []byte("two"), 0))
		mustDo(t, os.WriteFile(p("keep/deep/y.txt"), []byte("y"), 0o644))
	},
	func(t *testing.T, root string) {
		p := func(n string) string { return filepath.Join(root, n) }
		mustDo(t, os.RemoveAll(p("new")))
		mustDo(t, os.MkdirAll(p("new"), 0o755))
		mustDo(t, os.WriteFile(p("new/z"), []byte("z"), 0o644))
		mustDo(t, os.Lchown(p("keep/deep/y.txt"), 42, 43))
		mustDo(t, os.Remove(p("redo/sub")))
		mustDo(t, os.Symlink("new.txt", p("redo/sub")))
	},
	func(t *testing.T, root string) {
		p := func(n string) string { return filepath.Join(root, n) }
		mustDo(t, os.MkdirAll(p("x"), 0o755))
		mustDo(t, os.WriteFile(p("x/f1"), []byte("f"), 0o644))
		mustDo(t, os.Link(p("x/f1"), p("x/f2")))
		mustDo(t, os.WriteFile(p("x/cap"), []byte("cap3"), 0o755))
		mustDo(t, unix.Setxattr(p("x/cap"), "security.capability", capV2(), 0))
		mustDo(t, os.Remove(p("keep/owned.txt")))
	},
	func(t *testing.T, root string) {
		p := func(n string) string { return filepath.Join(root, n) }
		mustDo(t, os.WriteFile(p("x/f1"), []byte("f, rewritten"), 0o644))
		mustDo(t, os.RemoveAll(p("keep")))
		mustDo(t, os.MkdirAll(p("keep"), 0o755))
		mustDo(t, os.WriteFile(p("keep/only.txt"), []byte("only"), 0o644))
	},
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSquashedChainMatchesUnsquashed pauses and resumes one sandbox five
// times with max-layers 2, as OpenSandbox does (each resume from the last
// image pushed), and commits each state twice: with no bound, stacking a
// layer on the image it resumed from, and with the bound, which squashes
// that image's commits and the change into one layer on the base at the
// third and fifth pause. Both images, unpacked by containerd, must hold the
// same files, modes, owners, xattrs and hardlinks. Before the fifth, the
// node forgets every image of the sandbox (garbage collection), so the
// squash reads the earlier layers from the registry.
func TestSquashedChainMatchesUnsquashed(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	base := e.richBase(t)
	baseImg := remoteImage(t, base)
	baseLayers, err := baseImg.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := baseImg.Digest()
	if err != nil {
		t.Fatal(err)
	}
	baseDigest := d.String()
	repo := e.regB.Host + "/snap/squash-" + randSuffix()
	p := e.startPod(t, podContainer{"app", base})
	own := 0
	var got map[string]string
	for i, change := range squashChanges {
		pause := i + 1
		change(t, p.rootfs(t, "app"))
		if pause == 5 {
			e.forgetImages(t, repo, base)
		}
		// Both are kept: the layers of one state are one blob, which the
		// garbage collection after deleting the first image could take from
		// under the second (seen here with containerd 1.6: the second
		// image's unpack found it gone, once in twenty runs).
		flat := e.commitPush(t, p, fmt.Sprintf("%s:flat-%d", repo, pause), 0)
		squashed := e.commitPush(t, p, fmt.Sprintf("%s:%d", repo, pause), 2)
		if own++; own > 2 {
			own = 1
		}
		m, cfg := remoteManifestConfig(t, squashed)
		if len(m.Layers) != len(baseLayers)+own {
			t.Errorf("pause %d: %d layers, want the base's %d and %d of the sandbox's own", pause, len(m.Layers), len(baseLayers), own)
		}
		if n := commitLayers(t, cfg); n != own {
			t.Errorf("pause %d: the config counts %d layers of earlier commits, want %d", pause, n, own)
		}
		// The original image is named after any number of pauses, and its
		// layers are shared.
		if m.Annotations[ocispec.AnnotationBaseImageName] != base || m.Annotations[ocispec.AnnotationBaseImageDigest] != baseDigest {
			t.Errorf("pause %d: base annotations %s=%q, %s=%q; want %s and %s", pause, ocispec.AnnotationBaseImageName, m.Annotations[ocispec.AnnotationBaseImageName],
				ocispec.AnnotationBaseImageDigest, m.Annotations[ocispec.AnnotationBaseImageDigest], base, baseDigest)
		}
		for j, l := range baseLayers {
			if d, err := l.Digest(); err != nil || d.String() != m.Layers[j].Digest.String() {
				t.Errorf("pause %d: layer %d is %s, not the base's %s (%v)", pause, j, m.Layers[j].Digest, d, err)
			}
		}
		got = e.scanImage(t, ctx, squashed)
		want := e.scanImage(t, ctx, flat)
		for _, path := range unionKeys(got, want) {
			if got[path] != want[path] {
				t.Errorf("pause %d: %s:\n  squashed: %q\n  stacked:  %q", pause, path, got[path], want[path])
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		p = e.resumeFrom(t, squashed)
	}
	// The comparisons are not vacuous: the changes are there.
	for path, wantPrefix := range map[string]string{
		"new/z":           "-rw-r--r-- 0:0 1 " + sha(t, "z"),
		"x/f2":            "-rw-r--r-- 0:0 1 " + sha(t, "f"),
		"x/f1":            "-rw-r--r-- 0:0 12 " + sha(t, "f, rewritten"),
		"x/cap":           "-rwxr-xr-x 0:0 4 " + sha(t, "cap3"),
		"keep/only.txt":   "-rw-r--r-- 0:0 4 " + sha(t, "only"),
		"redo/sub":        "Lrwxrwxrwx 0:0 -> new.txt",
		"redo/new.txt":    "-rw-r--r--",
		"new/capbin":      "",
		"keep/deep/y.txt": "",
	} {
		if v, ok := got[path]; ok != (wantPrefix != "") || !strings.HasPrefix(v, wantPrefix) {
			t.Errorf("%s is %q, want %q...", path, v, wantPrefix)
		}
	}
	if !strings.Contains(got["x/cap"], "security.capability:") {
		t.Errorf("x/cap lost its capability: %q", got["x/cap"])
	}
	if got["hardlinks"] != "" {
		t.Errorf("hardlink groups %q, want none: x/f1 was rewritten", got["hardlinks"])
	}
}

// commitPush commits the pod's app container to ref under a new run ID,
// with max-layers maxLayers, pushes it and keeps it on the node, and returns
// the pushed <repository>@<digest>.
func (e *testEnv) commitPush(t *testing.T, p *runningPod, ref string, maxLayers int) string {
	t.Helper()
	p.runID = "run-" + randSuffix()
	c := e.committer(p.params(t, true, "app="+ref), func(cfg *committer.Config) {
		cfg.Params.KeepLocal, cfg.Params.KeepLocalMaxBytes, cfg.Params.MaxLayers = true, 1<<40, maxLayers
	})
	if _, err := c.Commit(context.Background()); err != nil {
		t.Fatalf("commit of %s: %v", ref, err)
	}
	pushed, _, err := c.Push(context.Background())
	if err != nil {
		t.Fatalf("push of %s: %v", ref, err)
	}
	return pushed[0].Target.Repository() + "@" + pushed[0].Digest
}

// forgetImages removes every image record of repo from containerd and
// collects the garbage, as a node's image garbage collection does: their
// layers but base's are gone from the content store, the unpacked
// snapshots a container runs on are not.
func (e *testEnv) forgetImages(t *testing.T, repo, base string) {
	t.Helper()
	shared := map[string]bool{}
	baseLayers, err := remoteImage(t, base).Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range baseLayers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		shared[d.String()] = true
	}
	ctx := e.ctrd.Ctx(context.Background())
	is := e.ctrd.Client.ImageService()
	imgs, err := is.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var layers []ocispec.Descriptor
	for _, img := range imgs {
		if !strings.HasPrefix(img.Name, repo) {
			continue
		}
		m, err := images.Manifest(ctx, e.ctrd.Client.ContentStore(), img.Target, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range m.Layers {
			if !shared[l.Digest.String()] {
				layers = append(layers, l)
			}
		}
		if err := is.Delete(ctx, img.Name); err != nil {
			t.Fatal(err)
		}
	}
	e.collectGarbage(t)
	if len(layers) == 0 {
		t.Fatalf("no image of %s in containerd", repo)
	}
	for _, l := range layers {
		if _, err := e.ctrd.Client.ContentStore().Info(ctx, l.Digest); !errdefs.IsNotFound(err) {
			t.Fatalf("layer %s of an image of %s still in the content store after garbage collection (%v)", l.Digest, repo, err)
		}
	}
}

// remoteManifestConfig reads a pushed image's manifest and config.
func remoteManifestConfig(t *testing.T, ref string) (ocispec.Manifest, map[string]json.RawMessage) {
	t.Helper()
	img := remoteImage(t, ref)
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	craw, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(craw, &cfg); err != nil {
		t.Fatal(err)
	}
	return m, cfg
}

// commitLayers counts the last history entries of an image config that
// earlier commits wrote: the layers a squash takes together.
func commitLayers(t *testing.T, cfg map[string]json.RawMessage) int {
	t.Helper()
	var hist []ocispec.History
	if err := json.Unmarshal(cfg["history"], &hist); err != nil {
		t.Fatalf("the config's history: %v", err)
	}
	n := 0
	for i := len(hist) - 1; i >= 0 && hist[i].Comment == "sandbox-snapshot-operator commit" && !hist[i].EmptyLayer; i-- {
		n++
	}
	return n
}
