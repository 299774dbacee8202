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
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// snapshotKept commits and pushes p's app container to ref under a new run
// ID, keeping the image on the node within bound bytes, and returns the
// kept image's name, <repository>@<digest>, and the run ID.
func (e *testEnv) snapshotKept(t *testing.T, p *runningPod, ref string, bound int64) (kept, runID string) {
	t.Helper()
	p.runID = "run-" + randSuffix()
	c := e.committer(p.params(t, true, "app="+ref), func(cfg *committer.Config) { cfg.Params.KeepLocal, cfg.Params.KeepLocalMaxBytes = true, bound })
	if _, err := c.Commit(context.Background()); err != nil {
		t.Fatalf("commit of %s: %v", ref, err)
	}
	pushed, _, err := c.Push(context.Background())
	if err != nil {
		t.Fatalf("push of %s: %v", ref, err)
	}
	return pushed[0].Target.Repository() + "@" + pushed[0].Digest, p.runID
}

// resumeFrom starts a pod container from a kept image, as a pod created
// from a pinned imageUri on this node is, and deletes it at the end.
func (e *testEnv) resumeFrom(t *testing.T, image string) *runningPod {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	r := &runningPod{name: "resumed-" + randSuffix(), namespace: "default", uid: "uid-" + randSuffix(),
		ctrs: map[string]client.Container{}, tasks: map[string]client.Task{}}
	ctr, task, err := e.ctrd.Run(ctx, ctrharness.PodContainer{ID: r.name + "-app", Pod: r.name, PodNamespace: r.namespace, PodUID: r.uid, Name: "app", Image: image}, nil)
	if err != nil {
		t.Fatalf("starting a container from %s: %v", image, err)
	}
	t.Cleanup(func() { _ = e.ctrd.DeleteContainer(ctx, ctr) })
	r.ctrs["app"], r.tasks["app"] = ctr, task
	return r
}

// collectGarbage runs containerd's garbage collector to completion.
func (e *testEnv) collectGarbage(t *testing.T) {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	ls := e.ctrd.Client.LeasesService()
	l, err := ls.Create(ctx, leases.WithRandomID())
	if err == nil {
		err = ls.Delete(ctx, l, leases.SynchronousDelete)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (e *testEnv) hasImage(t *testing.T, name string) bool {
	t.Helper()
	_, err := e.ctrd.Client.ImageService().Get(e.ctrd.Ctx(context.Background()), name)
	if err != nil && !errdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestKeepLocalForResume pushes with keep-local: the image stays unpacked
// under <repository>@<digest> alone (no tag, no working name), a container
// starts from it without a pull, and the oldest kept image no container
// runs from goes when the disk bound is reached.
func TestKeepLocalForResume(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	var kept []string
	for i := 1; i <= 2; i++ {
		p.writeBig(t, "app", "/data/big", int64(i)<<20)
		ref := fmt.Sprintf("%s/snap/%s-keep:%d", e.regA.Host, p.name, i)
		// Room for the second image alone: keeping it evicts the first.
		k, _ := e.snapshotKept(t, p, ref, 6<<20)
		kept = append(kept, k)
		img, err := e.ctrd.Client.GetImage(ctx, k)
		if err != nil {
			t.Fatalf("kept image %s: %v", k, err)
		}
		if ok, err := img.IsUnpacked(ctx, "overlayfs"); err != nil || !ok {
			t.Errorf("kept image %s is not unpacked (%v)", k, err)
		}
		if want := k[strings.LastIndex(k, "@")+1:]; img.Metadata().Target.Digest.String() != want {
			t.Errorf("kept image %s has manifest %s", k, img.Metadata().Target.Digest)
		}
		// A tag names whatever the registry holds for it now: it is not
		// kept, and neither is the commit step's working name.
		for _, n := range []string{ref, strings.TrimSuffix(ref, fmt.Sprintf(":%d", i)) + ":commit-" + p.runID} {
			if e.hasImage(t, n) {
				t.Errorf("image %s left in containerd; only %s is kept", n, k)
			}
		}
		if i == 1 {
			// A resume on this node: no pull (Run only reads local images).
			r := e.resumeFrom(t, k)
			if _, err := os.Stat(r.rootfs(t, "app") + "/data/big"); err != nil {
				t.Errorf("resumed container lacks the snapshot's file: %v", err)
			}
			if err := e.ctrd.DeleteContainer(ctx, r.ctrs["app"]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if e.hasImage(t, kept[0]) {
		t.Errorf("oldest kept image %s not evicted beyond the bound", kept[0])
	}
	if !e.hasImage(t, kept[1]) {
		t.Errorf("newest kept image %s evicted", kept[1])
	}
	_ = e.ctrd.Client.ImageService().Delete(ctx, kept[1])
}

// TestEvictionSparesImagesInUse keeps an image, resumes a container from
// it on this node, and evicts under a bound of one byte: the image the
// container runs from stays, and a commit of that container, which stacks
// on it, succeeds and keeps it.
func TestEvictionSparesImagesInUse(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	p.writeFile(t, "app", "/data/first", []byte("first\n"))
	k1, _ := e.snapshotKept(t, p, e.regA.Host+"/snap/"+p.name+"-inuse:1", 1<<30)
	r := e.resumeFrom(t, k1)
	defer e.ctrd.Client.ImageService().Delete(ctx, k1)

	p.writeFile(t, "app", "/data/second", []byte("second\n"))
	k2, _ := e.snapshotKept(t, p, e.regA.Host+"/snap/"+p.name+"-inuse:2", 1)
	if !e.hasImage(t, k1) {
		t.Fatalf("kept image %s evicted while a container runs from it", k1)
	}
	if e.hasImage(t, k2) {
		t.Errorf("kept image %s, which no container runs from, not evicted beyond a bound of 1 byte", k2)
	}
	e.collectGarbage(t)

	r.writeFile(t, "app", "/data/resumed", []byte("resumed\n"))
	k3, _ := e.snapshotKept(t, r, e.regA.Host+"/snap/"+p.name+"-inuse:3", 1<<30)
	defer e.ctrd.Client.ImageService().Delete(ctx, k3)
	if !e.hasImage(t, k1) {
		t.Errorf("kept image %s evicted while a container runs from it", k1)
	}
	e.assertAllRunning(t, r)
	code, out, err := e.ctrd.RunToCompletion(ctx, "verify-"+randSuffix(), k3, "cat", "/data/first", "/data/resumed")
	if err != nil || code != 0 || out != "first\nresumed\n" {
		t.Errorf("the resumed container's snapshot: code=%d err=%v output=%q", code, err, out)
	}
}

// TestBaseFromRegistryWhenRecordGone resumes a container from a kept image
// and removes the image's record, as the kubelet's image garbage collector
// or an older operator's eviction did: containerd keeps the container's
// snapshots but collects the manifest and config. A commit of the container
// takes its base from the registry by the digest it was created with, and
// stacks on exactly those layers.
func TestBaseFromRegistryWhenRecordGone(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	p.writeFile(t, "app", "/data/first", []byte("first\n"))
	ref1 := e.regA.Host + "/snap/" + p.name + "-gone:1"
	k1, _ := e.snapshotKept(t, p, ref1, 1<<30)
	r := e.resumeFrom(t, k1)
	img, err := e.ctrd.Client.ImageService().Get(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ctrd.Client.ImageService().Delete(ctx, k1); err != nil {
		t.Fatal(err)
	}
	e.collectGarbage(t)
	if _, err := e.ctrd.Client.ContentStore().Info(ctx, img.Target.Digest); !errdefs.IsNotFound(err) {
		t.Fatalf("manifest %s still in the content store after its record went (err %v)", img.Target.Digest, err)
	}

	r.writeFile(t, "app", "/data/resumed", []byte("resumed\n"))
	ref := e.regA.Host + "/snap/" + p.name + "-gone:2"
	k2, _ := e.snapshotKept(t, r, ref, 1<<30)
	defer e.ctrd.Client.ImageService().Delete(ctx, k2)
	e.assertAllRunning(t, r)
	want := manifestLayers(t, ref1, img.Target.Digest.String())
	m, err := remoteImage(t, k2).Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != len(want)+1 {
		t.Fatalf("pushed image has %d layers, want its base's %d plus one", len(m.Layers), len(want))
	}
	for i, l := range want {
		if m.Layers[i].Digest.String() != l {
			t.Errorf("layer %d is %s, want the base's %s", i, m.Layers[i].Digest, l)
		}
	}
	code, out, err := e.ctrd.RunToCompletion(ctx, "verify-"+randSuffix(), k2, "cat", "/data/first", "/data/resumed")
	if err != nil || code != 0 || out != "first\nresumed\n" {
		t.Errorf("the resumed container's snapshot: code=%d err=%v output=%q", code, err, out)
	}
}

// TestReleaseKeptImages releases the images of two deleted snapshots: one
// no container runs from goes at once; one a container runs from is marked
// and stays, and goes at the next eviction once the container is gone,
// whatever the bound.
func TestReleaseKeptImages(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	k1, run1 := e.snapshotKept(t, p, e.regA.Host+"/snap/"+p.name+"-release:1", 1<<30)
	p.writeFile(t, "app", "/data/x", []byte("x"))
	k2, run2 := e.snapshotKept(t, p, e.regA.Host+"/snap/"+p.name+"-release:2", 1<<30)
	r := e.resumeFrom(t, k2)

	release := func(run string) (int, int) {
		t.Helper()
		rp, err := task.ParseParams(task.RawParams{PodName: p.name, PodNamespace: p.namespace, RunID: run, InsecureRegistry: "true", Mode: task.ModeRelease})
		if err != nil {
			t.Fatal(err)
		}
		removed, marked, err := e.committer(rp).Release(context.Background())
		if err != nil {
			t.Fatalf("release of run %s: %v", run, err)
		}
		return removed, marked
	}
	if removed, marked := release(run1); removed != 1 || marked != 0 || e.hasImage(t, k1) {
		t.Errorf("release of an image no container runs from: removed %d, marked %d, still there: %v", removed, marked, e.hasImage(t, k1))
	}
	if removed, marked := release(run2); removed != 0 || marked != 1 || !e.hasImage(t, k2) {
		t.Errorf("release of an image a container runs from: removed %d, marked %d, still there: %v", removed, marked, e.hasImage(t, k2))
	}
	if removed, marked := release("run-none"); removed != 0 || marked != 0 {
		t.Errorf("release of a run that kept nothing: removed %d, marked %d", removed, marked)
	}

	if err := e.ctrd.DeleteContainer(ctx, r.ctrs["app"]); err != nil {
		t.Fatal(err)
	}
	k3, _ := e.snapshotKept(t, p, e.regA.Host+"/snap/"+p.name+"-release:3", 1<<30)
	defer e.ctrd.Client.ImageService().Delete(ctx, k3)
	if e.hasImage(t, k2) {
		t.Errorf("released image %s, which no container runs from any more, not evicted", k2)
	}
	if !e.hasImage(t, k3) {
		t.Errorf("kept image %s evicted within the bound", k3)
	}
}

// TestTwoPodsOneTagOneNode commits two pods to one tag on one node, both
// commits before either push, as two namespaces' sandboxes of one name did
// when their images shared a repository: each push pushes its own pod's
// image, whatever the other run committed under the same tag.
func TestTwoPodsOneTagOneNode(t *testing.T) {
	e := requireEnv(t)
	ref := e.regA.Host + "/snap/shared-" + randSuffix() + ":1"
	var cms []*testCommitter
	var res []*committer.CommitResult
	for _, who := range []string{"one", "two"} {
		p := e.startPod(t, podContainer{"app", e.dockerBase})
		p.writeFile(t, "app", "/who", []byte(who+"\n"))
		c := e.committer(p.params(t, true, "app="+ref))
		r, err := c.Commit(context.Background())
		if err != nil {
			t.Fatalf("commit of pod %s: %v", who, err)
		}
		cms, res = append(cms, c), append(res, r)
	}
	for i, who := range []string{"one", "two"} {
		pushed, _, err := cms[i].Push(context.Background())
		if err != nil {
			t.Fatalf("push of pod %s: %v", who, err)
		}
		if got, want := pushed[0].Digest, res[i].Images[0].Manifest.Digest.String(); got != want {
			t.Errorf("pod %s pushed manifest %s, its commit made %s", who, got, want)
		}
		if got := string(lastLayerFiles(t, pushed[0].Target.Repository()+"@"+pushed[0].Digest)["who"]); got != who+"\n" {
			t.Errorf("pod %s's pushed image holds /who %q", who, got)
		}
	}
}

// TestIngestFileInMiBMessages ingests a layer file, as the push step does
// for an image it keeps: it reaches containerd whole and labelled, in one
// write (one gRPC message) per MiB, and ingesting it again changes nothing.
func TestIngestFileInMiBMessages(t *testing.T) {
	e := requireEnv(t)
	// The blob is referenced by nothing: a lease keeps containerd's garbage
	// collector, which earlier tests' deletions set off, from taking it
	// between the two ingests (a collection runs there, to be sure of it).
	ctx, done, err := e.ctrd.Client.WithLease(e.ctrd.Ctx(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = done(context.WithoutCancel(ctx)) })
	cs := e.ctrd.Client.ContentStore()
	b := make([]byte, 5<<20+1)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "layer")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(b), Size: int64(len(b))}
	labels := map[string]string{oci.LabelUncompressed: d.Digest.String()}
	t.Cleanup(func() { _ = cs.Delete(ctx, d.Digest) })
	for i, want := range []int{6, 0} {
		if i > 0 {
			e.collectGarbage(t)
		}
		spy := &writeCounter{Ingester: cs}
		if err := oci.IngestFile(ctx, spy, d, file, labels); err != nil {
			t.Fatalf("ingest %d: %v", i+1, err)
		}
		if spy.writes != want {
			t.Errorf("ingest %d of %d bytes took %d writes, want %d", i+1, d.Size, spy.writes, want)
		}
	}
	info, err := cs.Info(ctx, d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != d.Size || info.Labels[oci.LabelUncompressed] != d.Digest.String() {
		t.Errorf("ingested blob: size %d, labels %v; want %d and %s=%s", info.Size, info.Labels, d.Size, oci.LabelUncompressed, d.Digest)
	}
}

// writeCounter counts the writes to the content writers it opens.
type writeCounter struct {
	content.Ingester
	writes int
}

// Writer implements content.Ingester.
func (w *writeCounter) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	cw, err := w.Ingester.Writer(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return &countedWriter{Writer: cw, n: &w.writes}, nil
}

type countedWriter struct {
	content.Writer
	n *int
}

// Write implements io.Writer.
func (w *countedWriter) Write(p []byte) (int, error) {
	*w.n++
	return w.Writer.Write(p)
}
