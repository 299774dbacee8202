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
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/typeurl/v2"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/cri"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// busyboxWithFile is the busybox base with one more layer holding path.
func busyboxWithFile(t *testing.T, path, data string) v1.Image {
	t.Helper()
	base, err := ctrharness.BusyboxImage(false)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: 0o644, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(tw, data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// retaggedPod pushes and pulls images A and B, starts a pod container from
// A through tag T, lets prepare adjust the image records, then re-points T
// to B, as a node re-pulling a moved tag does.
func (e *testEnv) retaggedPod(t *testing.T, prepare func(ctx context.Context, a images.Image, ctr client.Container), more ...podContainer) (p *runningPod, tag string, a, b images.Image) {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	is := e.ctrd.Client.ImageService()
	repo := e.regA.Host + "/base/retag-" + randSuffix()
	refA, refB := repo+"-a:1", repo+"-b:1"
	for ref, id := range map[string]string{refA: "A\n", refB: "B\n"} {
		if err := ctrharness.PushImage(ref, busyboxWithFile(t, "etc/base-id", id)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ctrd.Pull(ctx, ref); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = is.Delete(ctx, ref) })
	}
	var err error
	if a, err = is.Get(ctx, refA); err != nil {
		t.Fatal(err)
	}
	if b, err = is.Get(ctx, refB); err != nil {
		t.Fatal(err)
	}
	tag = repo + ":moving"
	if _, err := is.Create(ctx, images.Image{Name: tag, Target: a.Target}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = is.Delete(ctx, tag) })
	p = e.startPod(t, append([]podContainer{{"app", tag}}, more...)...)
	prepare(ctx, a, p.ctrs["app"])
	if _, err := is.Update(ctx, images.Image{Name: tag, Target: b.Target}, "target"); err != nil {
		t.Fatal(err)
	}
	return p, tag, a, b
}

// configDigest returns the config digest (the image ID) of a pulled image.
func (e *testEnv) configDigest(t *testing.T, img images.Image) string {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	cfg, err := images.Config(ctx, e.ctrd.Client.ContentStore(), img.Target, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Digest.String()
}

// TestBaseByIdentityAfterRetag starts a container from image A by tag T and
// re-points T to image B, whose layers differ. The committed image must be
// A's layers plus the diff, found through the CRI plugin's image ID record or
// through another name of A, never B's layers.
func TestBaseByIdentityAfterRetag(t *testing.T) {
	e := requireEnv(t)
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, ctx context.Context, a images.Image, ctr client.Container)
	}{
		{"CRI image ID record", func(t *testing.T, ctx context.Context, a images.Image, ctr client.Container) {
			// As the CRI plugin does: A is also recorded under its image
			// ID, and the container's metadata extension names that ID.
			// A's tag is then removed, so only the ID leads to A.
			is := e.ctrd.Client.ImageService()
			id := e.configDigest(t, a)
			if _, err := is.Create(ctx, images.Image{Name: id, Target: a.Target}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = is.Delete(ctx, id) })
			if err := is.Delete(ctx, a.Name); err != nil {
				t.Fatal(err)
			}
			info, err := ctr.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			meta := fmt.Sprintf(`{"Version":"v1","Metadata":{"ID":%q,"Name":"app","ImageRef":%q}}`, info.ID, id)
			info.Extensions = map[string]typeurl.Any{cri.ExtensionMetadata: &anypb.Any{
				TypeUrl: "github.com/containerd/containerd/pkg/cri/store/container/Metadata", Value: []byte(meta)}}
			if _, err := e.ctrd.Client.ContainerService().Update(ctx, containers.Container{ID: info.ID, Extensions: info.Extensions},
				"extensions."+cri.ExtensionMetadata); err != nil {
				t.Fatal(err)
			}
		}},
		{"digest reference only", func(t *testing.T, ctx context.Context, a images.Image, _ client.Container) {
			// A stays known as repo@digest only, as after a pull by digest.
			is := e.ctrd.Client.ImageService()
			byDigest := strings.TrimSuffix(a.Name, ":1") + "@" + a.Target.Digest.String()
			if _, err := is.Create(ctx, images.Image{Name: byDigest, Target: a.Target}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = is.Delete(ctx, byDigest) })
			if err := is.Delete(ctx, a.Name); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := e.ctrd.Ctx(context.Background())
			p, tag, a, b := e.retaggedPod(t, func(ctx context.Context, a images.Image, ctr client.Container) { tc.prepare(t, ctx, a, ctr) })
			p.writeFile(t, "app", "/data/change.txt", []byte("changed\n"))
			ref := e.regA.Host + "/snap/" + p.name + "-retag:1"
			c := e.committer(p.params(t, true, "app="+ref))
			res, err := c.Commit(context.Background())
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
			e.assertAllRunning(t, p)
			if _, _, err := c.Push(context.Background()); err != nil {
				t.Fatalf("push: %v", err)
			}
			t.Logf("T=%s moved from %s to %s; committed %s", tag, a.Target.Digest, b.Target.Digest, res.Images[0].Manifest.Digest)

			// The pushed image's lower layers are A's.
			wantLayers := manifestLayers(t, a.Name, a.Target.Digest.String())
			m, err := remoteImage(t, ref).Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Layers) != len(wantLayers)+1 {
				t.Fatalf("pushed image has %d layers, want A's %d plus one", len(m.Layers), len(wantLayers))
			}
			for i, l := range wantLayers {
				if m.Layers[i].Digest.String() != l {
					t.Errorf("layer %d is %s, want A's %s", i, m.Layers[i].Digest, l)
				}
			}
			// Resumed: the filesystem is A's plus the change.
			if _, err := e.ctrd.Pull(ctx, ref); err != nil {
				t.Fatalf("pulling %s back: %v", ref, err)
			}
			defer e.ctrd.Client.ImageService().Delete(ctx, ref)
			code, out, err := e.ctrd.RunToCompletion(ctx, "resume-"+randSuffix(), ref, "cat", "/etc/base-id", "/data/change.txt")
			if err != nil || code != 0 || out != "A\nchanged\n" {
				t.Errorf("resumed image: code=%d err=%v output=%q, want A's file and the change", code, err, out)
			}
		})
	}
}

// manifestLayers lists the layer digests of an image in the registry, by
// its repository and manifest digest.
func manifestLayers(t *testing.T, tagRef, manifestDigest string) []string {
	t.Helper()
	m, err := remoteImage(t, strings.TrimSuffix(tagRef, ":1")+"@"+manifestDigest).Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range m.Layers {
		out = append(out, l.Digest.String())
	}
	return out
}

// TestBaseMismatchRefused re-points the tag and leaves no other record of
// A: the commit refuses with an error naming the parent chain, the tag and
// what it points to now, and leaves every container running and unmarked.
func TestBaseMismatchRefused(t *testing.T) {
	e := requireEnv(t)
	p, tag, _, b := e.retaggedPod(t, func(ctx context.Context, a images.Image, _ client.Container) {
		if err := e.ctrd.Client.ImageService().Delete(ctx, a.Name); err != nil {
			t.Fatal(err)
		}
	}, podContainer{"sidecar", e.ociBase})
	c := e.committer(p.params(t, true, "app="+e.regA.Host+"/snap/mismatch:1", "sidecar="+e.regA.Host+"/snap/mismatch-side:1"),
		inPause(func(context.Context, []*freeze.Container) error {
			t.Error("paused although the base matches no image")
			return nil
		}))
	_, err := c.Commit(context.Background())
	t.Logf("commit error: %v", err)
	for _, w := range []string{`container "app"`, "rootfs parent sha256:", "matches no image", "tag " + tag + " now points to " + b.Target.Digest.String()} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("commit error lacks %q", w)
		}
	}
	e.assertAllRunning(t, p)
}
