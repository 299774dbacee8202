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

package committer

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// CRI labels used to find a pod's containers in containerd.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
	labelCRIKind       = "io.cri-containerd.kind"
)

// Labels the committer writes.
const (
	// LabelPausedBy marks a container the committer is about to pause; its
	// value is the run ID. It is removed after the thaw. mode=unpause only
	// thaws containers carrying its own run ID, so a container paused by
	// somebody else stays paused.
	LabelPausedBy = "sandbox.opensandbox.io/paused-by"
	// LabelSourceImage records, on the committed image, the image the
	// container was created from.
	LabelSourceImage = "sandbox.opensandbox.io/source-image"
	// LabelSourceRepos records, on the committed image, the repositories the
	// base layers can be fetched from when containerd no longer holds them.
	LabelSourceRepos = "sandbox.opensandbox.io/source-repositories"
	// LabelCommittedFrom records pod/container on the committed image.
	LabelCommittedFrom = "sandbox.opensandbox.io/committed-from"
)

// DefaultNamespace is the containerd namespace the CRI plugin uses.
const DefaultNamespace = "k8s.io"

// Config configures a Committer.
type Config struct {
	// Params are the validated Task parameters.
	Params *task.Params
	// Namespace is the containerd namespace, DefaultNamespace when empty.
	Namespace string
	// Keychain resolves registry credentials (push only). Anonymous when nil.
	Keychain authn.Keychain
	// MaxPause bounds the time containers stay frozen; 0 means task.DefaultMaxPause.
	MaxPause time.Duration
	// WalkingDiffer forces containerd's walking differ (which compares the
	// whole image) even where the overlay differ applies.
	WalkingDiffer bool
	// CopyDir, when set, is where the overlay differ copies a container's
	// upper directory inside the pause, when that directory is readable here
	// (see stage.go); otherwise containerd tars it inside the pause.
	CopyDir string
	// LayerDir, when set, receives a file of each new layer in place of a
	// copy in containerd; the push step uploads from it, ingests it into
	// containerd when it keeps the image, and removes it (see layerdir.go).
	// Both steps must see the same directory.
	LayerDir string
	// ScratchLimit, when not zero, bounds what a commit writes to CopyDir
	// and LayerDir, the commit pod's own disk: its ephemeral-storage limit,
	// past which the kubelet would evict it.
	ScratchLimit uint64
	// RootCAs verify the registry's certificate; the system's when nil.
	RootCAs *x509.CertPool
	// CheckpointDir is where CRIU, through containerd, writes memory snapshots
	// for Checkpoint; containerd and this process must both see it at
	// this path.
	CheckpointDir string
	// MaxLayers bounds the layers a sandbox's commits stack on its base
	// image: a commit on top of MaxLayers of them squashes them and its
	// change into one layer (see squash.go). 0 means no bound.
	MaxLayers int
	// KeepLocal keeps pushed images in containerd, unpacked, for a resume on
	// this node; KeepLocalMaxBytes bounds the uncompressed bytes of all kept
	// snapshot images (oldest evicted first).
	KeepLocal         bool
	KeepLocalMaxBytes int64
	// MemoryRestoreBase, when set, is the image, pinned by digest, that a
	// restore starts a memory snapshot from where it could not pull the
	// container's own base image: the snapshot then holds the container's
	// whole root filesystem (restoreBases).
	MemoryRestoreBase string
	// AllowAnonymousPull lets Checkpoint push to a repository anyone may
	// pull from; otherwise it refuses before the freeze (privateTargets).
	AllowAnonymousPull bool
	// Log receives progress lines; os.Stderr when nil.
	Log io.Writer
}

// Committer pauses, commits, pushes and thaws the containers of one pod.
type Committer struct {
	cfg    Config
	client *client.Client
	log    *log.Logger
	frz    freezer
	owned  ownedArchives

	// hookInPause, when set (tests only), runs while the containers are frozen.
	hookInPause func(context.Context) error
	// chunkSize, when set (tests only), replaces upload.DefaultChunkSize.
	chunkSize int
}

// New returns a Committer using an existing containerd client.
func New(c *client.Client, cfg Config) *Committer {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.MaxPause == 0 {
		cfg.MaxPause = task.DefaultMaxPause
	}
	if cfg.Keychain == nil {
		cfg.Keychain = authn.NewMultiKeychain()
	}
	w := cfg.Log
	if w == nil {
		w = os.Stderr
	}
	return &Committer{cfg: cfg, client: c, log: log.New(w, "", log.LstdFlags|log.Lmicroseconds)}
}

func (c *Committer) podRef() string {
	return c.cfg.Params.PodNamespace + "/" + c.cfg.Params.PodName + " (uid " + c.cfg.Params.PodUID + ")"
}

// liveContainer is the running (or already paused) attempt of one target.
type liveContainer struct {
	target task.Target
	ctr    client.Container
	info   containers.Container
	task   client.Task
	// foundPaused is true when the task was paused when found. Only an
	// earlier attempt of this same run may have paused it (checkOwnership):
	// it is committed as it is and thawed like the ones this process pauses.
	foundPaused bool
}

// String names the container, its base image and its target for errors.
func (l *liveContainer) String() string {
	s := fmt.Sprintf("container %q (id %s, image %s", l.target.Container, shortID(l.info.ID), l.info.Image)
	if l.target.Image != "" {
		s += ", target " + l.target.Image
	}
	return s + ")"
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// podContainers lists the CRI containers of the pod, grouped by container
// name. The pod UID is part of the filter: a pod re-created under the same
// name has other containers, which are never touched.
func (c *Committer) podContainers(ctx context.Context) (map[string][]client.Container, error) {
	p := c.cfg.Params
	filter := fmt.Sprintf("labels.%q==%s,labels.%q==%s,labels.%q==%s",
		LabelPodName, strconv.Quote(p.PodName), LabelPodNamespace, strconv.Quote(p.PodNamespace), LabelPodUID, strconv.Quote(p.PodUID))
	list, err := c.client.Containers(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("pod %s: listing containers in containerd namespace %s: %w", c.podRef(), c.cfg.Namespace, err)
	}
	out := map[string][]client.Container{}
	for _, ctr := range list {
		labels, err := ctr.Labels(ctx)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("pod %s: reading labels of container %s: %w", c.podRef(), shortID(ctr.ID()), err)
		}
		if labels[labelCRIKind] == "sandbox" {
			continue
		}
		if n := labels[LabelContainerName]; n != "" {
			out[n] = append(out[n], ctr)
		}
	}
	return out, nil
}

// findLive picks, for every target, the attempt whose task is running (or
// paused); exited attempts are skipped. With allowMissing, targets without
// a live attempt are left out instead of failing.
func (c *Committer) findLive(ctx context.Context, allowMissing bool) ([]*liveContainer, error) {
	byName, err := c.podContainers(ctx)
	if err != nil {
		return nil, err
	}
	var out []*liveContainer
	for _, t := range c.cfg.Params.Targets {
		var cands []*liveContainer
		exited := 0
		for _, ctr := range byName[t.Container] {
			info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata)
			if err != nil {
				if errdefs.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("pod %s container %q: reading container %s: %w", c.podRef(), t.Container, shortID(ctr.ID()), err)
			}
			task, err := ctr.Task(ctx, nil)
			if err != nil {
				if errdefs.IsNotFound(err) {
					exited++
					continue
				}
				return nil, fmt.Errorf("pod %s container %q: loading task of %s: %w", c.podRef(), t.Container, shortID(ctr.ID()), err)
			}
			st, err := task.Status(ctx)
			if err != nil {
				if errdefs.IsNotFound(err) {
					exited++
					continue
				}
				return nil, fmt.Errorf("pod %s container %q: task status of %s: %w", c.podRef(), t.Container, shortID(ctr.ID()), err)
			}
			switch st.Status {
			case client.Running, client.Paused, client.Pausing:
				cands = append(cands, &liveContainer{target: t, ctr: ctr, info: info, task: task, foundPaused: st.Status != client.Running})
			default:
				exited++
			}
		}
		if len(cands) == 0 {
			if allowMissing {
				c.log.Printf("pod %s container %q: no running container found (%d exited attempts); skipping", c.podRef(), t.Container, exited)
				continue
			}
			return nil, fmt.Errorf("pod %s container %q (target image %s): no running container found in containerd namespace %s (%d exited attempts)",
				c.podRef(), t.Container, t.Image, c.cfg.Namespace, exited)
		}
		sort.Slice(cands, func(i, j int) bool { return cands[i].info.CreatedAt.After(cands[j].info.CreatedAt) })
		if len(cands) > 1 {
			c.log.Printf("pod %s container %q: %d live attempts, using the newest %s", c.podRef(), t.Container, len(cands), shortID(cands[0].info.ID))
		}
		out = append(out, cands[0])
	}
	return out, nil
}

// checkOwnership fails with ErrFrozenElsewhere, touching nothing, when a
// target container is paused without a marker: something other than
// sandbox-commit froze it. A container paused with another run's marker is
// thawed, and the commit goes on: it runs under the pod lock, which every
// run holds from before its pause until after its thaw, so that run died
// mid-pause (killed; its thaw failed; its snapshot's finalizer forced off
// before an unpause ran). Only a run that is alive, holding the lock, makes
// a commit fail (tryLockPod).
func (c *Committer) checkOwnership(ctx context.Context, live []*liveContainer) error {
	var errs []error
	var stale []*liveContainer
	for _, l := range live {
		marker := l.info.Labels[LabelPausedBy]
		switch {
		case !l.foundPaused && marker != "" && marker != c.cfg.Params.RunID:
			// Running: the marker is stale (its run ended without removing
			// it), since no run holds the pod lock but this one.
			c.log.Printf("pod %s %s is running with the stale marker %s=%s; taking it over", c.podRef(), l, LabelPausedBy, marker)
		case !l.foundPaused:
		case marker == "":
			errs = append(errs, fmt.Errorf("pod %s %s is paused without a %s marker (paused by something other than sandbox-commit)",
				c.podRef(), l, LabelPausedBy))
		case marker != c.cfg.Params.RunID:
			stale = append(stale, l)
		default:
			c.log.Printf("pod %s %s was paused by an earlier attempt of this run; committing it as it is", c.podRef(), l)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", errors.Join(errs...), ErrFrozenElsewhere)
	}
	for _, l := range stale {
		marker := l.info.Labels[LabelPausedBy]
		if _, err := c.resume(ctx, l); err != nil {
			return fmt.Errorf("thawing what run %s, which holds no lock, left paused: %w", marker, err)
		}
		l.foundPaused = false
		c.log.Printf("pod %s %s was left paused by run %s, which holds no lock any more: thawed it", c.podRef(), l, marker)
	}
	return nil
}

// freezer tracks the tasks this process paused so that every exit path,
// including a signal, can thaw them.
type freezer struct {
	// thawMu serialises thaws, so that a signal handler waits for a thaw the
	// main flow has started before the process exits.
	thawMu    sync.Mutex
	mu        sync.Mutex
	closed    bool
	inflight  sync.WaitGroup
	attempted []*liveContainer
	// thawed counts the containers thawed so far, under thawMu.
	thawed int
}

var errAborted = errors.New("aborted by signal")

// ErrThawFailed is wrapped by errors after which containers may still be
// paused; the caller should exit with a code that triggers mode=unpause.
var ErrThawFailed = errors.New("containers may still be paused")

// ErrMaxPauseExceeded is wrapped by the error of a commit whose pause window
// reached Config.MaxPause; the containers are thawed before it is returned.
var ErrMaxPauseExceeded = errors.New("max-pause exceeded")

// begin registers a pause attempt; it fails once the freezer is closed.
func (f *freezer) begin(l *liveContainer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errAborted
	}
	f.attempted = append(f.attempted, l)
	f.inflight.Add(1)
	return nil
}

// take closes the freezer (when close is set) and returns the attempted
// tasks, clearing the list so that each is thawed by one caller only.
func (f *freezer) take(closeIt bool) []*liveContainer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if closeIt {
		f.closed = true
	}
	out := f.attempted
	f.attempted = nil
	return out
}

// markAll labels every container not already paused by this run with the
// run ID, before any pause.
func (c *Committer) markAll(ctx context.Context, live []*liveContainer) error {
	for _, l := range live {
		if l.foundPaused {
			continue
		}
		if _, err := l.ctr.SetLabels(ctx, map[string]string{LabelPausedBy: c.cfg.Params.RunID}); err != nil {
			return fmt.Errorf("pod %s %s: marking before pause: %w", c.podRef(), l, err)
		}
	}
	return nil
}

// pauseAll pauses the containers not already paused by this run, in
// parallel (markAll has marked them); it returns when all are frozen.
func (c *Committer) pauseAll(ctx context.Context, live []*liveContainer) error {
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, l := range live {
		if err := c.frz.begin(l); err != nil {
			errs[i] = err
			continue
		}
		if l.foundPaused {
			c.frz.inflight.Done()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.frz.inflight.Done()
			if err := l.task.Pause(ctx); err != nil {
				errs[i] = fmt.Errorf("pod %s %s: pause: %w", c.podRef(), l, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// whileFrozen marks and pauses every container of live at once, runs
// capture, and thaws them, on every path; it returns the pause window. The
// window is bounded by Config.MaxPause: past it the containers are thawed
// and the error wraps ErrMaxPauseExceeded; one that may have left them
// paused wraps ErrThawFailed.
func (c *Committer) whileFrozen(ctx context.Context, live []*liveContainer, capture func(context.Context) error) (window time.Duration, err error) {
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if n, terr := c.thawAll(tctx, false); terr != nil {
			err = errors.Join(err, fmt.Errorf("%w: %w", ErrThawFailed, terr))
		} else if n > 0 {
			c.log.Printf("pod %s: thawed %d containers after failure", c.podRef(), n)
		}
	}()
	if err := c.markAll(ctx, live); err != nil {
		return 0, err
	}
	start := time.Now()
	deadline := start.Add(c.cfg.MaxPause)
	pctx, pcancel := context.WithDeadline(ctx, deadline)
	err = c.pauseAll(pctx, live)
	if err == nil {
		c.log.Printf("pod %s: %d containers frozen in %s", c.podRef(), len(live), time.Since(start).Round(time.Millisecond))
		err = capture(pctx)
	}
	// containerd enforces the deadline too (gRPC sends it along), and may
	// answer before pctx's own timer fires: the clock decides. The last
	// error is kept as words only: whatever it was (runc names CRIU in most
	// of its errors), the commit failed for the bound.
	if err != nil && (errors.Is(pctx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline)) {
		err = fmt.Errorf("pod %s: %w: the containers were frozen longer than max-pause %s; they are thawed and nothing was committed (last error: %v)",
			c.podRef(), ErrMaxPauseExceeded, c.cfg.MaxPause, err)
	}
	pcancel()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	_, terr := c.thawAll(tctx, false)
	cancel()
	window = time.Since(start)
	if terr != nil {
		terr = fmt.Errorf("%w: %w", ErrThawFailed, terr)
	}
	return window, errors.Join(err, terr)
}

// thawAll resumes every task this process tried to pause. It is safe to call
// more than once and from the signal handler.
func (c *Committer) thawAll(ctx context.Context, closeIt bool) (int, error) {
	c.frz.thawMu.Lock()
	defer c.frz.thawMu.Unlock()
	list := c.frz.take(closeIt)
	if closeIt {
		done := make(chan struct{})
		go func() { c.frz.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	errs := make([]error, len(list))
	thawed := make([]bool, len(list))
	var wg sync.WaitGroup
	for i, l := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := c.resume(ctx, l)
			thawed[i], errs[i] = ok, err
		}()
	}
	wg.Wait()
	n := 0
	for _, ok := range thawed {
		if ok {
			n++
		}
	}
	c.frz.thawed += n
	return n, errors.Join(errs...)
}

// resume thaws one task if it is paused and drops the marker label.
func (c *Committer) resume(ctx context.Context, l *liveContainer) (bool, error) {
	thawed := false
	st, err := l.task.Status(ctx)
	switch {
	case err != nil && errdefs.IsNotFound(err):
		// The task is gone: nothing is frozen any more.
	case err == nil && st.Status != client.Paused && st.Status != client.Pausing:
		// Already running.
	default:
		// Paused, or status unknown: resuming a running task only errors.
		if rerr := l.task.Resume(ctx); rerr != nil && !errdefs.IsNotFound(rerr) {
			if st2, serr := l.task.Status(ctx); serr != nil || st2.Status == client.Paused || st2.Status == client.Pausing {
				return false, fmt.Errorf("pod %s %s: resume: %w", c.podRef(), l, rerr)
			}
		} else if rerr == nil {
			thawed = true
		}
	}
	if _, err := l.ctr.SetLabels(ctx, map[string]string{LabelPausedBy: ""}); err != nil && !errdefs.IsNotFound(err) {
		c.log.Printf("pod %s %s: thawed, but removing label %s failed: %v", c.podRef(), l, LabelPausedBy, err)
	}
	return thawed, nil
}

func (c *Committer) nsCtx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, c.cfg.Namespace)
}

// Abort is meant for a signal handler: it stops new pauses, waits briefly
// for pause calls in flight and thaws everything this process paused. It
// returns how many containers this process has thawed in all, counting those
// the main flow thawed when the signal cancelled its work.
func (c *Committer) Abort(timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := c.thawAll(c.nsCtx(ctx), true)
	c.frz.thawMu.Lock()
	defer c.frz.thawMu.Unlock()
	return c.frz.thawed, err
}

// Unpause implements mode=unpause: it thaws every container of the pod that
// carries this run's LabelPausedBy marker (all attempts; the containers
// param, if given, is not needed) and leaves containers paused by others
// alone, reporting them. It waits for a commit of the pod in flight, whose
// containers it must not touch, to finish. It is idempotent.
func (c *Committer) Unpause(ctx context.Context) (n int, err error) {
	ctx = c.nsCtx(ctx)
	lock, err := c.waitLockPod(ctx)
	if err != nil {
		return 0, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := lock.release(rctx); rerr != nil {
			c.log.Printf("pod %s: releasing the containerd lock: %v", c.podRef(), rerr)
		}
	}()
	byName, err := c.podContainers(ctx)
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
					errs = append(errs, fmt.Errorf("pod %s container %q: reading %s: %w", c.podRef(), cname, shortID(ctr.ID()), err))
				}
				continue
			}
			l := &liveContainer{target: task.Target{Container: cname}, ctr: ctr, info: info}
			task, err := ctr.Task(ctx, nil)
			if err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("pod %s %s: loading task: %w", c.podRef(), l, err))
				continue
			}
			if marker := info.Labels[LabelPausedBy]; marker != c.cfg.Params.RunID {
				if task != nil {
					if st, err := task.Status(ctx); err == nil && (st.Status == client.Paused || st.Status == client.Pausing) {
						by := "something other than sandbox-commit (no " + LabelPausedBy + " marker)"
						if marker != "" {
							by = "run " + marker
						}
						c.log.Printf("pod %s %s is paused by %s, not by run %s; leaving it paused", c.podRef(), l, by, c.cfg.Params.RunID)
					}
				}
				continue
			}
			if task == nil {
				// No task any more: just drop the stale marker.
				if _, err := ctr.SetLabels(ctx, map[string]string{LabelPausedBy: ""}); err != nil && !errdefs.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("pod %s %s: removing label: %w", c.podRef(), l, err))
				}
				continue
			}
			l.task = task
			ok, err := c.resume(ctx, l)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok {
				n++
				c.log.Printf("pod %s %s thawed", c.podRef(), l)
			} else {
				c.log.Printf("pod %s %s was running; removed stale label", c.podRef(), l)
			}
		}
	}
	return n, errors.Join(errs...)
}
