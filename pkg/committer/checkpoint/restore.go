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

// baseResolveTimeout bounds the resolution of one base image.
const baseResolveTimeout = 30 * time.Second

// RestoreBases picks, before the freeze, what each restore starts from. The
// CRI restore pulls config.dump's RootfsImageRef (2.1 always, 2.2+ if missing)
// anonymously, HTTPS only (HTTP from loopback), without registry config. Where
// it cannot, restoreBase, holding nothing of any sandbox's, is the base and the
// checkpoint holds the whole rootfs (selfContained[i]); with no restoreBase,
// ErrUnsupported. A loopback registry, outside this network namespace, is
// unchecked, trusted only without restoreBase.
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

// PrivateTargets fails with ErrUnsupported, before the freeze, when a target
// repository answers an anonymous tag listing other than 401/403: a memory
// snapshot holds the sandbox's keys and tokens.
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

// pullableAsRestored resolves ref as the CRI restore does.
func pullableAsRestored(ctx context.Context, ref string) error {
	if _, err := digest.Parse(ref); err == nil {
		return errors.New("the CRI reports it by its ID only, which names no registry")
	}
	ctx, cancel := context.WithTimeout(ctx, baseResolveTimeout)
	defer cancel()
	_, _, err := docker.NewResolver(docker.ResolverOptions{}).Resolve(ctx, ref)
	return err
}

// onLoopback reports whether ref's registry is localhost, 127.0.0.0/8 or ::1.
func onLoopback(ref string) bool {
	spec, err := reference.Parse(ref)
	if err != nil {
		return false
	}
	local, err := docker.MatchLocalhost(spec.Hostname())
	return err == nil && local
}
