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

package freeze

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/cri"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// podContainers lists the pod's CRI containers, not its sandbox, by name.
func (f *Freezer) podContainers(ctx context.Context) (map[string][]client.Container, error) {
	filter := fmt.Sprintf("labels.%q==%s,labels.%q==%s,labels.%q==%s",
		cri.LabelPodName, strconv.Quote(f.pod.Name), cri.LabelPodNamespace, strconv.Quote(f.pod.Namespace), cri.LabelPodUID, strconv.Quote(f.pod.UID))
	list, err := f.client.Containers(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("pod %s: listing containers in containerd namespace %s: %w", f.pod, f.opts.Namespace, err)
	}
	out := map[string][]client.Container{}
	for _, ctr := range list {
		labels, err := ctr.Labels(ctx)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("pod %s: reading labels of container %s: %w", f.pod, ShortID(ctr.ID()), err)
		}
		if labels[cri.LabelKind] == "sandbox" {
			continue
		}
		if n := labels[cri.LabelContainerName]; n != "" {
			out[n] = append(out[n], ctr)
		}
	}
	return out, nil
}

// FindLive returns each target's newest running or paused attempt.
func (f *Freezer) FindLive(ctx context.Context, targets []task.Target) ([]*Container, error) {
	byName, err := f.podContainers(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Container
	for _, t := range targets {
		var cands []*Container
		exited := 0
		for _, ctr := range byName[t.Container] {
			info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata)
			if err != nil {
				if errdefs.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("pod %s container %q: reading container %s: %w", f.pod, t.Container, ShortID(ctr.ID()), err)
			}
			tk, err := ctr.Task(ctx, nil)
			if err != nil {
				if errdefs.IsNotFound(err) {
					exited++
					continue
				}
				return nil, fmt.Errorf("pod %s container %q: loading task of %s: %w", f.pod, t.Container, ShortID(ctr.ID()), err)
			}
			st, err := tk.Status(ctx)
			if err != nil {
				if errdefs.IsNotFound(err) {
					exited++
					continue
				}
				return nil, fmt.Errorf("pod %s container %q: task status of %s: %w", f.pod, t.Container, ShortID(ctr.ID()), err)
			}
			switch st.Status {
			case client.Running, client.Paused, client.Pausing:
				cands = append(cands, &Container{Target: t, Container: ctr, Info: info, Task: tk, FoundPaused: st.Status != client.Running})
			default:
				exited++
			}
		}
		if len(cands) == 0 {
			return nil, fmt.Errorf("pod %s container %q (target image %s): no running container found in containerd namespace %s (%d exited attempts)",
				f.pod, t.Container, t.Image, f.opts.Namespace, exited)
		}
		sort.Slice(cands, func(i, j int) bool { return cands[i].Info.CreatedAt.After(cands[j].Info.CreatedAt) })
		if len(cands) > 1 {
			f.opts.Log.Printf("pod %s container %q: %d live attempts, using the newest %s", f.pod, t.Container, len(cands), ShortID(cands[0].Info.ID))
		}
		out = append(out, cands[0])
	}
	return out, nil
}

// CheckOwnership fails with ErrFrozenElsewhere, touching nothing, if a target
// is paused without a marker. One marked by another run is thawed: runs hold
// the pod lock from pause to thaw, so that run died mid-pause.
func (f *Freezer) CheckOwnership(ctx context.Context, live []*Container) error {
	var errs []error
	var stale []*Container
	for _, l := range live {
		marker := l.Info.Labels[LabelPausedBy]
		switch {
		case !l.FoundPaused && marker != "" && marker != f.opts.RunID:
			f.opts.Log.Printf("pod %s %s is running with the stale marker %s=%s; taking it over", f.pod, l, LabelPausedBy, marker)
		case !l.FoundPaused:
		case marker == "":
			errs = append(errs, fmt.Errorf("pod %s %s is paused without a %s marker (paused by something other than sandbox-commit)",
				f.pod, l, LabelPausedBy))
		case marker != f.opts.RunID:
			stale = append(stale, l)
		default:
			f.opts.Log.Printf("pod %s %s was paused by an earlier attempt of this run; committing it as it is", f.pod, l)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", errors.Join(errs...), ErrFrozenElsewhere)
	}
	for _, l := range stale {
		marker := l.Info.Labels[LabelPausedBy]
		if _, err := f.resume(ctx, l); err != nil {
			return fmt.Errorf("thawing what run %s, which holds no lock, left paused: %w", marker, err)
		}
		l.FoundPaused = false
		f.opts.Log.Printf("pod %s %s was left paused by run %s, which holds no lock any more: thawed it", f.pod, l, marker)
	}
	return nil
}

// Unpause thaws the pod's containers this run marked, logging others' paused
// ones, and waits for the pod lock so as not to touch a commit in flight.
func (f *Freezer) Unpause(ctx context.Context) (n int, err error) {
	lock, err := f.waitLock(ctx)
	if err != nil {
		return 0, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := lock.Release(rctx); rerr != nil {
			f.opts.Log.Printf("pod %s: releasing the containerd lock: %v", f.pod, rerr)
		}
	}()
	byName, err := f.podContainers(ctx)
	if err != nil {
		return 0, err
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, cname := range names {
		for _, ctr := range byName[cname] {
			info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata)
			if err != nil {
				if !errdefs.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("pod %s container %q: reading %s: %w", f.pod, cname, ShortID(ctr.ID()), err))
				}
				continue
			}
			l := &Container{Target: task.Target{Container: cname}, Container: ctr, Info: info}
			tk, err := ctr.Task(ctx, nil)
			if err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("pod %s %s: loading task: %w", f.pod, l, err))
				continue
			}
			if marker := info.Labels[LabelPausedBy]; marker != f.opts.RunID {
				if tk != nil {
					if st, err := tk.Status(ctx); err == nil && (st.Status == client.Paused || st.Status == client.Pausing) {
						by := "something other than sandbox-commit (no " + LabelPausedBy + " marker)"
						if marker != "" {
							by = "run " + marker
						}
						f.opts.Log.Printf("pod %s %s is paused by %s, not by run %s; leaving it paused", f.pod, l, by, f.opts.RunID)
					}
				}
				continue
			}
			if tk == nil {
				if _, err := ctr.SetLabels(ctx, map[string]string{LabelPausedBy: ""}); err != nil && !errdefs.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("pod %s %s: removing label: %w", f.pod, l, err))
				}
				continue
			}
			l.Task = tk
			ok, err := f.resume(ctx, l)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok {
				n++
				f.opts.Log.Printf("pod %s %s thawed", f.pod, l)
			} else {
				f.opts.Log.Printf("pod %s %s was running; removed stale label", f.pod, l)
			}
		}
	}
	return n, errors.Join(errs...)
}
