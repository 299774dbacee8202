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
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// basicKeychain gives every registry one user's credentials, as a push
// secret does.
type basicKeychain authn.Basic

// Resolve implements authn.Keychain.
func (k basicKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	b := authn.Basic(k)
	return &b, nil
}

// pushRestoreBase pushes a restore base (ctrharness.RestoreBaseImage) to
// ref and returns its name pinned by digest.
func pushRestoreBase(t *testing.T, ref string) string {
	t.Helper()
	img, err := ctrharness.RestoreBaseImage()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrharness.PushImage(ref, img); err != nil {
		t.Fatalf("pushing the restore base: %v", err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r.Context().Name() + "@" + d.String()
}

// TestCheckpointRestorePrivateBase takes a memory snapshot of a container
// whose base image is on a registry that asks for credentials, which
// containerd's restore never sends, and pushes it to a repository there:
// with a restore base (an empty image anyone may pull), the checkpoint
// holds the container's whole root filesystem and names that base, and a
// node that no longer holds the private base restores it, its processes
// going on and its files back. The resumed sandbox's next memory snapshot,
// aimed at a repository anyone may pull from, is refused before the freeze,
// naming the repository, and the sandbox counts on.
func TestCheckpointRestorePrivateBase(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRI(t, criuDir(t))
	if !checkpoints(cri) {
		t.Skipf("%s refuses memory snapshots before freezing (TestCheckpointRestore)", cri.Version)
	}
	ctx := context.Background()
	const user, pass = "tenant", "tenant-secret"
	reg := ctrharness.NewRegistryWithAuth(user, pass)
	t.Cleanup(reg.Close)
	auth := &runtimeapi.AuthConfig{Username: user, Password: pass}
	img, err := ctrharness.BusyboxImage(true)
	if err != nil {
		t.Fatal(err)
	}
	base := reg.Host + "/tenant/base:1"
	if err := ctrharness.PushImageAuth(base, img, user, pass); err != nil {
		t.Fatal(err)
	}
	restoreBase := pushRestoreBase(t, e.regB.Host+"/platform/restore-base:1")

	port := freePort(t)
	sandbox := "sb-" + randSuffix()
	pod, err := cri.RunPod(ctx, sandbox, "default", "uid-"+randSuffix())
	if err != nil {
		t.Fatal(err)
	}
	id, err := cri.StartContainerWithAuth(ctx, pod, "app", base, auth, hibernating(port)...)
	if err != nil {
		t.Fatal(err)
	}
	mark := waitCounting(t, ctx, cri, id, 10)
	if _, err := cri.ExecSync(ctx, id, "sh", "-c", "echo the-change >/data/change"); err != nil {
		t.Fatal(err)
	}

	private := func(cfg *committer.Config) {
		cfg.Params.AllowAnonymousPull, cfg.Params.MemoryRestoreBase = false, restoreBase
	}
	cm := e.checkpointer(t, cri, pod, reg.Host+"/tenant/hibernate/"+sandbox+"/app:mem", private, func(cfg *committer.Config) {
		cfg.Keychain = basicKeychain{Username: user, Password: pass}
	})
	if _, err := cm.Checkpoint(ctx); err != nil {
		t.Fatalf("checkpoint: %v\n%s", err, cri.Log())
	}
	pushed, _, err := cm.Push(ctx)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	ref := pushed[0].Target.Repository() + "@" + pushed[0].Digest
	if got := pushedAnnotations(t, ref, user, pass)[ocispec.AnnotationBaseImageName]; got != restoreBase {
		t.Errorf("the checkpoint's %s is %q, want the restore base %s", ocispec.AnnotationBaseImageName, got, restoreBase)
	}

	// A node that never held the tenant's base: the pod and its image gone.
	if err := cri.RemovePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	imgs, err := cri.Client.ImageService().List(cri.Ctx(ctx))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range imgs {
		if strings.HasPrefix(i.Name, reg.Host+"/") {
			if err := cri.Client.ImageService().Delete(cri.Ctx(ctx), i.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if pod, err = cri.RunPod(ctx, sandbox, "default", "uid-"+randSuffix()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if id, err = cri.StartContainerWithAuth(ctx, pod, "app", ref, auth); err != nil {
		t.Fatalf("restoring from %s: %v\n%s", ref, err, cri.Log())
	}
	t.Logf("restored from %s over %s in %d ms", ref, restoreBase, time.Since(start).Milliseconds())
	if rmark, _ := counterLines(t, ctx, cri, id); rmark != mark {
		t.Fatalf("the restored counter runs under mark %s, want %s: it restarted", rmark, mark)
	}
	countsOn(t, ctx, cri, id, "after the restore")
	if got, err := ping(port); err != nil || got != "pong" {
		t.Errorf("after the restore the listening socket answers %q, %v", got, err)
	}
	if got, err := cri.ExecSync(ctx, id, "cat", "/data/change"); err != nil || got != "the-change\n" {
		t.Errorf("after the restore /data/change holds %q (%v), want the change", got, err)
	}

	public := e.checkpointer(t, cri, pod, e.regB.Host+"/tenant/hibernate/"+sandbox+"/app:public", private)
	_, err = public.Checkpoint(ctx)
	if !errors.Is(err, checkpoint.ErrUnsupported) || !strings.Contains(err.Error(), "anyone may pull from repository "+e.regB.Host+"/tenant/hibernate/") {
		t.Fatalf("a memory snapshot to a repository anyone may pull from: got %v, want %v naming the repository", err, checkpoint.ErrUnsupported)
	}
	t.Logf("refused as expected: %v", err)
	countsOn(t, ctx, cri, id, "after the refused checkpoint")
}

// pushedAnnotations reads the manifest annotations of ref, on a registry
// that asks for credentials.
func pushedAnnotations(t *testing.T, ref, user, pass string) map[string]string {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	d, err := remote.Get(r, remote.WithAuth(&authn.Basic{Username: user, Password: pass}))
	if err != nil {
		t.Fatalf("reading %s: %v", ref, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(d.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	return m.Annotations
}

// TestCheckpointRestoreViaCreateOff takes a memory snapshot on a containerd
// 2.2 or 2.3 whose CRI restores through CreateContainer only when told to,
// and is not: the snapshot is refused before the freeze, naming the
// setting, rather than pushed into an image no pod there resumes from, and
// the container counts on.
func TestCheckpointRestoreViaCreateOff(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRIWith(t, ctrharness.CRIOptions{Path: []string{criuDir(t)}, NoRestoreViaCreate: true})
	if !regexp.MustCompile(` v2\.[23]\.`).MatchString(cri.Version) {
		t.Skipf("%s has no setting for restore through CreateContainer", cri.Version)
	}
	ctx := context.Background()
	pod, id := e.counting(t, ctx, cri, "")
	cm := e.checkpointer(t, cri, pod, e.regB.Host+"/hibernate/"+pod.Config.Metadata.Name+"/app:off")
	_, err := cm.Checkpoint(ctx)
	if !errors.Is(err, checkpoint.ErrUnsupported) || !strings.Contains(err.Error(), "enable_experimental_restore_via_create = true") {
		t.Fatalf("checkpoint on %s with restore through CreateContainer off: got %v, want %v naming the setting", cri.Version, err, checkpoint.ErrUnsupported)
	}
	t.Logf("refused as expected: %v", err)
	countsOn(t, ctx, cri, id, "after the refused checkpoint")
}
