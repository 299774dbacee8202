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

// Package freeze pauses and thaws a pod's live containers in containerd for a
// commit: it thaws on every path, a signal's too, marks what it pauses with its
// run ID, and keeps runs of one pod apart with a lock held in containerd.
package freeze

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// LabelPausedBy holds the ID of the run that paused a container, until its
// thaw. Unpause thaws only its own run's, leaving others' paused.
const LabelPausedBy = "sandbox.opensandbox.io/paused-by"

var errAborted = errors.New("aborted by signal")

// ErrThawFailed marks errors that may leave containers paused: exit with a code
// that runs mode=unpause.
var ErrThawFailed = errors.New("containers may still be paused")

// ErrMaxPauseExceeded marks a freeze cut short, and thawed, at max-pause.
var ErrMaxPauseExceeded = errors.New("max-pause exceeded")

// Pod names the pod whose containers a Freezer handles.
type Pod struct {
	Name      string
	Namespace string
	// UID selects the containers, sparing a pod re-created under the name.
	UID string
}

// String names the pod in messages.
func (p Pod) String() string {
	return p.Namespace + "/" + p.Name + " (uid " + p.UID + ")"
}

// Container is the running (or already paused) attempt of one target.
type Container struct {
	Target    task.Target
	Container client.Container
	Info      containers.Container
	Task      client.Task
	// FoundPaused: paused by this run's earlier attempt; committed as is.
	FoundPaused bool
}

// String names the container, its base image and its target for errors.
func (l *Container) String() string {
	s := fmt.Sprintf("container %q (id %s, image %s", l.Target.Container, ShortID(l.Info.ID), l.Info.Image)
	if l.Target.Image != "" {
		s += ", target " + l.Target.Image
	}
	return s + ")"
}

// ShortID shortens a containerd ID for messages.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Options configures a Freezer.
type Options struct {
	// Namespace is the containerd namespace of the CRI plugin.
	Namespace string
	// RunID is the LabelPausedBy value on the containers this run pauses.
	RunID string
	// MaxPause bounds the time containers stay frozen.
	MaxPause time.Duration
	Log      *log.Logger
}

// Freezer pauses and thaws the containers of one pod.
type Freezer struct {
	client *client.Client
	pod    Pod
	opts   Options

	// thawMu serialises thaws: a signal handler waits for the main flow's.
	thawMu    sync.Mutex
	mu        sync.Mutex
	closed    bool
	inflight  sync.WaitGroup
	attempted []*Container
	// thawed counts the containers thawed so far, under thawMu.
	thawed int
}

// New returns a Freezer of pod's containers in c.
func New(c *client.Client, pod Pod, opts Options) *Freezer {
	return &Freezer{client: c, pod: pod, opts: opts}
}

// begin registers a pause attempt; it fails once the freezer is closed.
func (f *Freezer) begin(l *Container) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errAborted
	}
	f.attempted = append(f.attempted, l)
	f.inflight.Add(1)
	return nil
}

// take returns and clears the attempted containers: each has one thawer.
func (f *Freezer) take(closeIt bool) []*Container {
	f.mu.Lock()
	defer f.mu.Unlock()
	if closeIt {
		f.closed = true
	}
	out := f.attempted
	f.attempted = nil
	return out
}

// markAll labels the containers to pause with the run ID, before any pause.
func (f *Freezer) markAll(ctx context.Context, live []*Container) error {
	for _, l := range live {
		if l.FoundPaused {
			continue
		}
		if _, err := l.Container.SetLabels(ctx, map[string]string{LabelPausedBy: f.opts.RunID}); err != nil {
			return fmt.Errorf("pod %s %s: marking before pause: %w", f.pod, l, err)
		}
	}
	return nil
}

// pauseAll pauses the marked containers in parallel.
func (f *Freezer) pauseAll(ctx context.Context, live []*Container) error {
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, l := range live {
		if err := f.begin(l); err != nil {
			errs[i] = err
			continue
		}
		if l.FoundPaused {
			f.inflight.Done()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.inflight.Done()
			if err := l.Task.Pause(ctx); err != nil {
				errs[i] = fmt.Errorf("pod %s %s: pause: %w", f.pod, l, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WhileFrozen pauses live, runs capture and thaws on every path, returning the
// pause window. Past Options.MaxPause the error wraps ErrMaxPauseExceeded; one
// that may leave them paused, ErrThawFailed.
func (f *Freezer) WhileFrozen(ctx context.Context, live []*Container, capture func(context.Context) error) (window time.Duration, err error) {
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if n, terr := f.thawAll(tctx, false); terr != nil {
			err = errors.Join(err, fmt.Errorf("%w: %w", ErrThawFailed, terr))
		} else if n > 0 {
			f.opts.Log.Printf("pod %s: thawed %d containers after failure", f.pod, n)
		}
	}()
	if err := f.markAll(ctx, live); err != nil {
		return 0, err
	}
	start := time.Now()
	deadline := start.Add(f.opts.MaxPause)
	pctx, pcancel := context.WithDeadline(ctx, deadline)
	err = f.pauseAll(pctx, live)
	if err == nil {
		f.opts.Log.Printf("pod %s: %d containers frozen in %s", f.pod, len(live), time.Since(start).Round(time.Millisecond))
		err = capture(pctx)
	}
	// The clock decides, as containerd may answer before pctx fires. The
	// last error, often naming CRIU, is text only: the bound is the cause.
	if err != nil && (errors.Is(pctx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline)) {
		err = fmt.Errorf("pod %s: %w: the containers were frozen longer than max-pause %s; they are thawed and nothing was committed (last error: %v)",
			f.pod, ErrMaxPauseExceeded, f.opts.MaxPause, err)
	}
	pcancel()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	_, terr := f.thawAll(tctx, false)
	cancel()
	window = time.Since(start)
	if terr != nil {
		terr = fmt.Errorf("%w: %w", ErrThawFailed, terr)
	}
	return window, errors.Join(err, terr)
}

// thawAll resumes all this process tried to pause; repeatable, signal-safe.
func (f *Freezer) thawAll(ctx context.Context, closeIt bool) (int, error) {
	f.thawMu.Lock()
	defer f.thawMu.Unlock()
	list := f.take(closeIt)
	if closeIt {
		done := make(chan struct{})
		go func() { f.inflight.Wait(); close(done) }()
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
			ok, err := f.resume(ctx, l)
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
	f.thawed += n
	return n, errors.Join(errs...)
}

// resume thaws one task if it is paused and drops the marker label.
func (f *Freezer) resume(ctx context.Context, l *Container) (bool, error) {
	thawed := false
	st, err := l.Task.Status(ctx)
	switch {
	case err != nil && errdefs.IsNotFound(err):
		// The task is gone: nothing is frozen any more.
	case err == nil && st.Status != client.Paused && st.Status != client.Pausing:
	default:
		// Paused or unknown: resuming a running task only errors.
		if rerr := l.Task.Resume(ctx); rerr != nil && !errdefs.IsNotFound(rerr) {
			if st2, serr := l.Task.Status(ctx); serr != nil || st2.Status == client.Paused || st2.Status == client.Pausing {
				return false, fmt.Errorf("pod %s %s: resume: %w", f.pod, l, rerr)
			}
		} else if rerr == nil {
			thawed = true
		}
	}
	if _, err := l.Container.SetLabels(ctx, map[string]string{LabelPausedBy: ""}); err != nil && !errdefs.IsNotFound(err) {
		f.opts.Log.Printf("pod %s %s: thawed, but removing label %s failed: %v", f.pod, l, LabelPausedBy, err)
	}
	return thawed, nil
}

// Abort, for a signal handler, stops new pauses, waits briefly for those in
// flight, thaws the rest and returns how many were thawed, main flow's too.
func (f *Freezer) Abort(timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := f.thawAll(namespaces.WithNamespace(ctx, f.opts.Namespace), true)
	f.thawMu.Lock()
	defer f.thawMu.Unlock()
	return f.thawed, err
}
