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

// Package registry is what the operator does in the snapshot registry
// beyond pushing: look manifests up, find the checkpoint images whose
// restore pulls one, and delete them. The controller deletes a snapshot's
// images with credentials of its own that no commit pod carries; the
// committer takes back, with the push credentials, what a failed push put.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// requestTimeout bounds each request to the registry, so that a slow
// registry does not hold a worker.
const requestTimeout = 20 * time.Second

// Client looks manifests up and deletes them.
type Client interface {
	// Digest returns the digest of the manifest ref names (a tag or a
	// digest), or "" when the registry does not hold it.
	Digest(ctx context.Context, ref name.Reference) (string, error)
	// Delete deletes what ref names: by digest, the manifest (with its
	// tags, on most registries); by tag, the tag, where the registry
	// deletes tags (OCI distribution 1.1). One the registry does not hold
	// counts as deleted.
	Delete(ctx context.Context, ref name.Reference) error
	// CheckpointsOf names the tagged checkpoint images in base's repository
	// that a restore pulls base for (restoresFrom).
	CheckpointsOf(ctx context.Context, base name.Digest) ([]string, error)
}

// Access names what the controller reaches the registry with: a
// dockerconfigjson Secret of its credentials and a ConfigMap of PEM
// certificates that verify the registry's, beside the system's roots; ""
// for none of either.
type Access struct {
	Secret      string
	CAConfigMap string
}

// For returns a Client with access.
type For func(ctx context.Context, access Access) (Client, error)

// New returns a Client that talks to the registry with
// go-containerregistry's remote, with the credentials keychain resolves and
// opts on every request.
func New(keychain authn.Keychain, opts ...remote.Option) Client {
	return &remoteClient{keychain: keychain, opts: opts}
}

// remoteClient is a Client over go-containerregistry's remote.
type remoteClient struct {
	keychain authn.Keychain
	opts     []remote.Option
}

func (r *remoteClient) options(ctx context.Context) []remote.Option {
	return append(slices.Clone(r.opts), remote.WithContext(ctx), remote.WithAuthFromKeychain(r.keychain))
}

// Digest implements Client.
func (r *remoteClient) Digest(ctx context.Context, ref name.Reference) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	desc, err := remote.Head(ref, r.options(ctx)...)
	switch {
	case isNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("looking up %s: %w", ref, err)
	}
	return desc.Digest.String(), nil
}

// Delete implements Client.
func (r *remoteClient) Delete(ctx context.Context, ref name.Reference) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if err := remote.Delete(ref, r.options(ctx)...); err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting %s: %w", ref, err)
	}
	return nil
}

// CheckpointsOf implements Client: it reads the manifest of every tag in
// base's repository but Chains' signatures and attestations, and counts a
// checkpoint image while the registry holds it by digest.
func (r *remoteClient) CheckpointsOf(ctx context.Context, base name.Digest) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	tags, err := remote.List(base.Context(), r.options(lctx)...)
	switch {
	case isNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing the tags of %s: %w", base.Context(), err)
	}
	var out []string
	for _, t := range tags {
		if slices.ContainsFunc(chainsSuffixes, func(s string) bool { return strings.HasSuffix(t, s) }) {
			continue
		}
		ref := base.Context().Tag(t)
		gctx, cancel := context.WithTimeout(ctx, requestTimeout)
		desc, err := remote.Get(ref, r.options(gctx)...)
		cancel()
		switch {
		case isNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading %s: %w", ref, err)
		}
		if !restoresFrom(desc.Manifest, base.DigestStr()) || desc.Digest.String() == base.DigestStr() {
			continue
		}
		// Resumes pull by digest: a registry may keep a tag whose manifest
		// was deleted.
		held, err := r.Digest(ctx, base.Context().Digest(desc.Digest.String()))
		if err != nil {
			return nil, err
		}
		if held != "" {
			out = append(out, ref.String()+"@"+desc.Digest.String())
		}
	}
	return out, nil
}

// restoresFrom reports whether manifest is a checkpoint image's whose
// restore pulls the image of digest base first: it carries
// task.AnnotationCheckpointName, and base as its
// org.opencontainers.image.base.digest.
func restoresFrom(manifest []byte, base string) bool {
	var m ocispec.Manifest
	if json.Unmarshal(manifest, &m) != nil {
		return false
	}
	_, checkpoint := m.Annotations[task.AnnotationCheckpointName]
	return checkpoint && m.Annotations[ocispec.AnnotationBaseImageDigest] == base
}

// chainsSuffixes are the tags Tekton Chains gives an image's signature and
// attestation: <repository>:sha256-<hex>.sig and .att.
var chainsSuffixes = []string{".sig", ".att"}

// DeleteImage deletes one manifest and, when Tekton Chains left them, its
// signature and attestation first.
func DeleteImage(ctx context.Context, c Client, d name.Digest) error {
	for _, suffix := range chainsSuffixes {
		tag := d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + suffix)
		digest, err := c.Digest(ctx, tag)
		if err != nil {
			return err
		}
		if digest == "" {
			continue
		}
		if err := c.Delete(ctx, d.Context().Digest(digest)); err != nil {
			return err
		}
	}
	return c.Delete(ctx, d)
}

// permanentStatuses are the registry answers that no retry changes: the
// credentials are refused, or the registry does not delete.
var permanentStatuses = []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusMethodNotAllowed}

// permanentCodes are the OCI distribution error codes that no retry changes.
var permanentCodes = []transport.ErrorCode{transport.UnauthorizedErrorCode, transport.DeniedErrorCode, transport.UnsupportedErrorCode}

// IsPermanent reports whether err is a registry answer that no retry
// changes: 401, 403, 405, or the codes UNAUTHORIZED, DENIED and UNSUPPORTED
// (deletion turned off, as distribution answers without
// REGISTRY_STORAGE_DELETE_ENABLED).
func IsPermanent(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	if slices.Contains(permanentStatuses, te.StatusCode) {
		return true
	}
	for _, d := range te.Errors {
		if slices.Contains(permanentCodes, d.Code) {
			return true
		}
	}
	return false
}

// isNotFound reports whether err is the registry's 404.
func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// NameOptions parse the references of a registry reached over plain HTTP
// when insecure is set.
func NameOptions(insecure bool) []name.Option {
	if insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}
