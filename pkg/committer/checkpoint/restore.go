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

package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// containerd 2.1's CRI restores a checkpoint only after pulling the image
// config.dump names (its RootfsImageRef), every time, through containerd's
// default resolver: anonymously, over HTTPS (plain HTTP only from loopback),
// without the CRI's registry configuration; 2.2 and later skip the pull when
// the node holds that image, and pull it the same way when it does not. A
// checkpoint that names the container's own base image is thus resumable only
// where anyone may pull that base. One that must not depend on that holds
// the container's whole root filesystem instead, as its rootfs-diff.tar, and
// names a restore base (Config.MemoryRestoreBase): an image that holds
// nothing of any sandbox's, which the restore pulls and lays the root
// filesystem over. restoreBases chooses, before the freeze.

// baseResolveTimeout bounds the resolution of one base image.
const baseResolveTimeout = 30 * time.Second

// RestoreBases decides, before anything is frozen, what a restore of each
// container's checkpoint starts from: its own base image where containerd's
// restore can pull that (pullableAsRestored), else Config.MemoryRestoreBase,
// the checkpoint then holding the whole root filesystem (selfContained[i]).
// Without a restore base, a base the restore cannot pull fails with
// ErrUnsupported. An image on a loopback registry is the
// node's own, out of this step's network namespace: unchecked, so relied on
// only when there is no restore base, and logged.
func (d *Dumper) RestoreBases(ctx context.Context, live []*freeze.Container, restoreBase string) (selfContained []bool, err error) {
	selfContained = make([]bool, len(live))
	for i, l := range live {
		st, err := d.Status(ctx, l)
		if err != nil {
			return nil, fmt.Errorf("pod %s %s: %w", d.pod, l, err)
		}
		ref := st.GetImageRef()
		var why error
		if onLoopback(ref) {
			if restoreBase == "" {
				d.log.Printf("pod %s %s: base image %s is on a loopback registry, out of this step's reach: not checked that a restore can pull it", d.pod, l, ref)
				continue
			}
			why = errors.New("it is on a loopback registry, out of this step's reach")
		} else if why = pullableAsRestored(ctx, ref); why == nil {
			continue
		}
		if restoreBase == "" {
			return nil, fmt.Errorf("pod %s %s: %w: containerd's restore pulls the container's base image %s anonymously, over HTTPS (plain HTTP only from loopback) and without the node's registry configuration, and so it cannot: %v; config-snapshot %s names an image a restore can start from instead",
				d.pod, l, ErrUnsupported, ref, why, task.ParamMemoryRestoreBase)
		}
		d.log.Printf("pod %s %s: a restore could not pull its base image %s (%v): its checkpoint holds its whole root filesystem, over the restore base %s", d.pod, l, ref, why, restoreBase)
		selfContained[i] = true
	}
	if !slices.Contains(selfContained, true) || onLoopback(restoreBase) {
		return selfContained, nil
	}
	if err := pullableAsRestored(ctx, restoreBase); err != nil {
		return nil, fmt.Errorf("pod %s: %w: containerd's restore pulls the %s %s anonymously, over HTTPS (plain HTTP only from loopback) and without the node's registry configuration, and so it cannot: %v",
			d.pod, ErrUnsupported, task.ParamMemoryRestoreBase, restoreBase, err)
	}
	return selfContained, nil
}

// PrivateTargets fails with ErrUnsupported, before anything
// is frozen, when anyone may pull from a target repository: a memory
// snapshot holds the sandbox's memory, and its keys and tokens with it.
// A repository whose registry answers an anonymous listing of its tags with
// 401 or 403 is private; one that lists them, or says it has none yet, is
// not. Config.AllowAnonymousPull skips the check.
func PrivateTargets(ctx context.Context, targets []task.Target, opts []remote.Option, pod string) error {
	ctx, cancel := context.WithTimeout(ctx, baseResolveTimeout)
	defer cancel()
	opts = append(opts[:len(opts):len(opts)], remote.WithAuth(authn.Anonymous), remote.WithContext(ctx))
	for _, t := range targets {
		repo := t.Tag.Context()
		_, err := remote.List(repo, opts...)
		var terr *transport.Error
		if errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden) {
			continue
		}
		if err != nil && !(errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound) {
			return fmt.Errorf("pod %s container %q: checking that repository %s refuses anonymous pulls: %w", pod, t.Container, repo, err)
		}
		return fmt.Errorf("pod %s container %q: %w: anyone may pull from repository %s, and a memory snapshot holds the sandbox's memory: push memory snapshots where pulls need credentials, or set config-snapshot %s to %s where only trusted parties reach the registry",
			pod, t.Container, ErrUnsupported, repo, task.ParamMemoryAnonymousPull, task.MemoryAnonymousPullAllow)
	}
	return nil
}

// pullableAsRestored resolves ref with the resolver containerd's client
// pulls with when given none, the one its CRI restore uses for a
// checkpoint's base image.
func pullableAsRestored(ctx context.Context, ref string) error {
	if _, err := digest.Parse(ref); err == nil {
		return errors.New("the CRI reports it by its ID only, which names no registry")
	}
	ctx, cancel := context.WithTimeout(ctx, baseResolveTimeout)
	defer cancel()
	_, _, err := docker.NewResolver(docker.ResolverOptions{}).Resolve(ctx, ref)
	return err
}

// onLoopback reports whether ref names an image on a loopback registry
// (localhost, 127.0.0.0/8 or ::1).
func onLoopback(ref string) bool {
	spec, err := reference.Parse(ref)
	if err != nil {
		return false
	}
	local, err := docker.MatchLocalhost(spec.Hostname())
	return err == nil && local
}
