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

package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/dockerconfig"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// TestDeleteImage pushes an image and Chains' signature beside it to a real
// registry, on loopback, and deletes the image: both manifests go, and an
// image already gone counts as deleted.
func TestDeleteImage(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, _ := random.Image(64, 1)
	sig, _ := random.Image(32, 1)
	ref, _ := name.NewTag(host+"/snapshots/team-a/sb/app:snap-1", name.Insecure)
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	sigRef := ref.Context().Tag(strings.Replace(d.String(), ":", "-", 1) + ".sig")
	if err := remote.Write(sigRef, sig); err != nil {
		t.Fatal(err)
	}
	c := New(dockerconfig.Anonymous())
	digest := ref.Context().Digest(d.String())
	if got, err := c.Digest(context.Background(), digest); err != nil || got != d.String() {
		t.Fatalf("Digest() = %q, %v before the deletion", got, err)
	}
	sd, _ := sig.Digest()
	if err := DeleteImage(context.Background(), c, digest); err != nil {
		t.Fatalf("DeleteImage() = %v", err)
	}
	// By digest: this registry keeps a tag whose manifest went.
	for _, r := range []name.Reference{digest, ref.Context().Digest(sd.String())} {
		if got, err := c.Digest(context.Background(), r); err != nil || got != "" {
			t.Errorf("Digest(%s) = %q, %v after the deletion", r, got, err)
		}
	}
	if err := DeleteImage(context.Background(), c, digest); err != nil {
		t.Errorf("DeleteImage() of an image already gone = %v", err)
	}
}

// TestCheckpointsOf pushes, to a real registry on loopback, a base image and
// beside it a checkpoint image restoring from it, one restoring from another
// image, a filesystem snapshot naming it as its base, and Chains' signature:
// only the first restores from the base, and once it is deleted none does.
func TestCheckpointsOf(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo, _ := name.NewRepository(strings.TrimPrefix(srv.URL, "http://")+"/snapshots/team-a/sb/app", name.Insecure)
	push := func(tag string, ann map[string]string) string {
		t.Helper()
		img, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		img = mutate.Annotations(img, ann).(v1.Image)
		if err := remote.Write(repo.Tag(tag), img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d.String()
	}
	checkpoint := func(base string) map[string]string {
		return map[string]string{task.AnnotationCheckpointName: "app", ocispec.AnnotationBaseImageDigest: base}
	}
	base := push("snap-1", nil)
	restoring := push("snap-2", checkpoint(base))
	push("snap-3", checkpoint("sha256:"+strings.Repeat("1", 64)))
	push("snap-4", map[string]string{ocispec.AnnotationBaseImageDigest: base})
	push(strings.Replace(restoring, ":", "-", 1)+".sig", checkpoint(base))
	c := New(dockerconfig.Anonymous())

	got, err := c.CheckpointsOf(context.Background(), repo.Digest(base))
	if want := []string{repo.Tag("snap-2").String() + "@" + restoring}; err != nil || !slices.Equal(got, want) {
		t.Errorf("CheckpointsOf(the base) = %q, %v; want %q", got, err, want)
	}
	if got, err := c.CheckpointsOf(context.Background(), repo.Digest(restoring)); err != nil || len(got) > 0 {
		t.Errorf("CheckpointsOf(the checkpoint) = %q, %v; want none", got, err)
	}
	if err := c.Delete(context.Background(), repo.Digest(restoring)); err != nil {
		t.Fatal(err)
	}
	if got, err := c.CheckpointsOf(context.Background(), repo.Digest(base)); err != nil || len(got) > 0 {
		t.Errorf("CheckpointsOf(the base) after the checkpoint's deletion = %q, %v; want none", got, err)
	}
	empty, _ := name.NewRepository(repo.RegistryStr()+"/snapshots/team-a/none/app", name.Insecure)
	if got, err := c.CheckpointsOf(context.Background(), empty.Digest(base)); err != nil || len(got) > 0 {
		t.Errorf("CheckpointsOf() in a repository the registry does not have = %q, %v; want none", got, err)
	}
}

// TestIsPermanent sorts registry answers: refused credentials and a
// registry that does not delete are final; the rest may pass.
func TestIsPermanent(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		want   bool
	}{
		{http.StatusUnauthorized, "UNAUTHORIZED", true},
		{http.StatusForbidden, "DENIED", true},
		{http.StatusMethodNotAllowed, "UNSUPPORTED", true},
		{http.StatusBadRequest, "UNSUPPORTED", true},
		{http.StatusInternalServerError, "UNKNOWN", false},
		{http.StatusServiceUnavailable, "UNAVAILABLE", false},
		{http.StatusTooManyRequests, "TOOMANYREQUESTS", false},
	} {
		rec := httptest.NewRecorder()
		rec.WriteHeader(tc.status)
		fmt.Fprintf(rec, `{"errors":[{"code":%q,"message":"answer"}]}`, tc.code)
		err := fmt.Errorf("deleting x: %w", transport.CheckError(rec.Result(), http.StatusAccepted))
		if got := IsPermanent(err); got != tc.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", err, got, tc.want)
		}
	}
	if IsPermanent(errors.New("connection refused")) {
		t.Error("IsPermanent(a connection error) = true")
	}
}

// TestDeleteRefused deletes from a registry that refuses deletion, as
// distribution does without REGISTRY_STORAGE_DELETE_ENABLED: the error is
// permanent.
func TestDeleteRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMethodNotAllowed)
		fmt.Fprint(w, `{"errors":[{"code":"UNSUPPORTED","message":"The operation is unsupported."}]}`)
	}))
	defer srv.Close()
	c := New(dockerconfig.Anonymous())
	d, _ := name.NewDigest(strings.TrimPrefix(srv.URL, "http://")+"/x@sha256:"+strings.Repeat("a", 64), name.Insecure)
	if err := c.Delete(context.Background(), d); err == nil || !IsPermanent(err) {
		t.Errorf("Delete() = %v, want a permanent error", err)
	}
}
