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

// Command committer is the step binary of the sandbox-commit Tekton Task: it
// freezes a pod's containers, commits their root filesystems as new image
// layers in containerd, thaws them, and pushes the images.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/dockerconfig"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/upload"
)

const (
	stepCommit = task.StepCommit
	stepPush   = task.StepPush
	// stepAll runs commit then push in one process (benchmarks, manual use).
	stepAll = "all"
)

type options struct {
	step, mode                          string
	podName, podNamespace, insecure     string
	podUID, runID, taskPodUID           string
	address, namespace, dockerConfig    string
	pauseWindowPath, digestsPath, imgsP string
	errorPath, differ, keepLocal        string
	keepLocalMax, copyDir, layerDir     string
	diskReserve                         string
	scratchLimit, registryCADir         string
	maxPause, maxLayers                 string
	snapshotMode, memoryFallback        string
	memoryRestoreBase, anonymousPull    string
	checkpointDir, snapshotModePath     string
	timeout                             time.Duration
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var o options
	fs := newFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		return exitFailed
	}
	params, err := task.ParseParams(rawParams(o, fs.Args()))
	if err == nil && o.step != stepCommit && o.step != stepPush && o.step != stepAll {
		err = fmt.Errorf("--step must be commit, push or all, got %q", o.step)
	}
	if err != nil {
		return fail(o, fmt.Errorf("invalid parameters: %w", err))
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	// The signal handler thaws whatever this process froze, lets the
	// cancelled work unwind for a while (it removes what it wrote into
	// containerd), then removes the checkpoint archives this process was
	// writing or pushing, before exiting.
	var cm atomic.Pointer[committer.Committer]
	var signaled atomic.Bool
	unwound := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "committer: received %s; thawing containers before exit\n", sig)
		signaled.Store(true)
		cancel()
		code := 128 + int(sig.(syscall.Signal))
		msg := fmt.Sprintf("interrupted by %s", sig)
		if c := cm.Load(); c != nil {
			n, err := c.Abort(20 * time.Second)
			if err != nil {
				msg = fmt.Sprintf("interrupted by %s; thaw failed: %v", sig, err)
			} else {
				msg = fmt.Sprintf("interrupted by %s; thawed %d containers", sig, n)
			}
			select {
			case <-unwound:
			case <-time.After(unwindTimeout):
			}
			if n := c.Discard(); n > 0 {
				msg += fmt.Sprintf("; removed %d checkpoint archive(s)", n)
			}
		}
		fmt.Fprintf(os.Stderr, "committer: %s\n", msg)
		_ = committer.WriteResult(o.errorPath, committer.FormatError(errors.New(msg)))
		os.Exit(code)
	}()

	err = execute(ctx, o, params, &cm)
	close(unwound)
	if signaled.Load() {
		// The signal handler owns the exit: it thaws, then exits 128+signal.
		select {}
	}
	if err != nil {
		return fail(o, err)
	}
	return 0
}

// unwindTimeout bounds how long the signal handler, after the thaw, waits
// for the cancelled work to remove what it wrote; with the thaw's 20 s it
// stays within a pod's default 30 s grace period.
const unwindTimeout = 5 * time.Second

// Exit codes. exitFailed (task.ExitCodeThawed) means nothing is left paused,
// exitFrozenElsewhere (task.ExitCodeFrozenElsewhere) that another run holds
// the pod and nothing was touched, and exitMemoryUnsupported
// (task.ExitCodeMemoryUnsupported) that the node cannot take a memory
// snapshot, nothing left paused; the operator runs mode=unpause after any
// other failure of the commit step.
const (
	exitFailed            = task.ExitCodeThawed
	exitMaybePaused       = 3
	exitFrozenElsewhere   = task.ExitCodeFrozenElsewhere
	exitMemoryUnsupported = task.ExitCodeMemoryUnsupported
)

// fail reports err on stderr and in the ERROR result and picks the exit code.
func fail(o options, err error) int {
	fmt.Fprintf(os.Stderr, "committer: %v\n", err)
	if werr := committer.WriteResult(o.errorPath, committer.FormatError(err)); werr != nil {
		fmt.Fprintf(os.Stderr, "committer: %v\n", werr)
	}
	switch {
	case errors.Is(err, freeze.ErrThawFailed):
		return exitMaybePaused
	case errors.Is(err, freeze.ErrFrozenElsewhere):
		return exitFrozenElsewhere
	case errors.Is(err, checkpoint.ErrUnsupported):
		return exitMemoryUnsupported
	}
	return exitFailed
}

// newFlagSet defines the committer's flags on o.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("committer", flag.ContinueOnError)
	fs.StringVar(&o.step, "step", stepCommit, "step to run: commit, push, or all (commit then push)")
	fs.StringVar(&o.mode, "mode", task.ModeCommit, "commit, or unpause (only thaw containers left paused by an earlier run)")
	fs.StringVar(&o.podName, "pod-name", "", "name of the pod whose containers are committed")
	fs.StringVar(&o.podNamespace, "pod-namespace", "", "namespace of the pod")
	fs.StringVar(&o.podUID, "pod-uid", "", "UID of the pod; only containers labelled io.kubernetes.pod.uid with it are touched")
	fs.StringVar(&o.taskPodUID, task.FlagTaskPodUID, "", "UID of the pod this step runs in (the Task's pod), which owns the memory snapshots it writes: a later run removes them once no container of that pod runs (unset: an hour after they were last written)")
	fs.StringVar(&o.runID, "run-id", "", "ID of this snapshot run (the SandboxSnapshot's UID): the paused-by marker; mode=unpause thaws only containers carrying it")
	fs.StringVar(&o.insecure, "insecure-registry", "false", "\"true\" allows plain HTTP and unverified TLS for registries")
	fs.StringVar(&o.address, "containerd-address", "/run/containerd/containerd.sock", "containerd socket")
	fs.StringVar(&o.namespace, "containerd-namespace", committer.DefaultNamespace, "containerd namespace of the CRI plugin")
	fs.StringVar(&o.dockerConfig, "docker-config", "", "directory holding a docker config.json with registry credentials (optional)")
	fs.StringVar(&o.pauseWindowPath, "pause-window-result", "", "file to write the PAUSE_WINDOW_MS result to")
	fs.StringVar(&o.digestsPath, "digests-result", "", "file to write the DIGESTS result to")
	fs.StringVar(&o.imgsP, "images-result", "", "file to write the IMAGES result to")
	fs.StringVar(&o.errorPath, "error-result", "", "file to write the ERROR result (a one-line error) to on failure")
	fs.StringVar(&o.maxPause, "max-pause", task.DefaultMaxPause.String(), "bound on the pause window (a Go duration): past it the containers are thawed and the commit fails (exit 1)")
	fs.StringVar(&o.maxLayers, "max-layers", strconv.Itoa(task.DefaultMaxLayers), fmt.Sprintf("bound on the layers a sandbox's commits stack on its base image: past it a commit squashes them and its change into one (0: never; at most %d)", task.MaxMaxLayers))
	fs.StringVar(&o.differ, "differ", "auto", "auto (overlayfs upper-directory differ where it applies, else containerd's walking differ) or walking")
	fs.StringVar(&o.copyDir, "copy-dir", "", "directory the overlay differ copies upper directories to inside the pause, when they are readable here (else containerd tars them in the pause)")
	fs.StringVar(&o.scratchLimit, "scratch-limit", "", "bytes the commit step may write to --copy-dir and --layer-dir together, its pod's ephemeral-storage limit (empty or 0: no bound); a snapshot that would write more fails before the freeze")
	fs.StringVar(&o.registryCADir, "registry-ca-dir", "", "directory of PEM files (a ConfigMap's keys) whose certificates verify the registry's, beside the system's roots; empty: the system's alone")
	fs.StringVar(&o.layerDir, "layer-dir", "", "directory the commit step writes each new layer to as a file, instead of into containerd (unset: into containerd); the push step uploads it from there, writes it into containerd only to keep the image, and removes it; both steps must see the same one")
	fs.StringVar(&o.keepLocal, "keep-local", strconv.FormatBool(task.DefaultKeepLocal), "\"true\" keeps pushed images unpacked in containerd for a resume on this node")
	fs.StringVar(&o.keepLocalMax, "keep-local-max-size", task.DefaultKeepLocalMaxSize, "bound on the node disk held by kept images (a Kubernetes quantity); the oldest are evicted")
	fs.StringVar(&o.diskReserve, task.ParamDiskReserve, task.DefaultDiskReserve, "what a snapshot leaves free on each filesystem it writes to, the nodes' eviction threshold: a percentage of the filesystem (at most 50%) or a Kubernetes quantity; a snapshot that would leave less fails before the freeze (exit 1)")
	fs.StringVar(&o.snapshotMode, "snapshot-mode", task.SnapshotModeFilesystem, "Filesystem (commit the root filesystems) or Memory (checkpoint processes and memory too, through containerd's CRI and CRIU)")
	fs.StringVar(&o.memoryFallback, "memory-fallback", task.MemoryFallbackNone, "None (a node that cannot checkpoint fails the snapshot, exit 5; one whose disk has no room for it, exit 1) or Filesystem (take a filesystem snapshot instead)")
	fs.StringVar(&o.memoryRestoreBase, task.ParamMemoryRestoreBase, "", "image, pinned by digest, holding nothing of any sandbox's, that a restore starts a memory snapshot from where it cannot pull the container's own base image anonymously; the snapshot then holds the whole root filesystem (empty: such a snapshot is refused)")
	fs.StringVar(&o.anonymousPull, task.ParamMemoryAnonymousPull, task.MemoryAnonymousPullRefuse, "Refuse (a memory snapshot whose target repository anyone may pull from is refused before the freeze, exit 5) or Allow")
	fs.StringVar(&o.checkpointDir, "checkpoint-dir", "", "directory, at the same path for containerd, where memory snapshots are written (snapshot-mode=Memory)")
	fs.StringVar(&o.snapshotModePath, "snapshot-mode-result", "", "file to write the SNAPSHOT_MODE result (the mode taken) to")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "overall timeout")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: committer [flags] <container>=<image> ...\n")
		fs.PrintDefaults()
	}
	return fs
}

// rawParams are the Task parameters o's flags and the containers args pass.
func rawParams(o options, containers []string) task.RawParams {
	return task.RawParams{
		PodName: o.podName, PodNamespace: o.podNamespace, PodUID: o.podUID, RunID: o.runID, TaskPodUID: o.taskPodUID,
		Containers: containers, InsecureRegistry: o.insecure, Mode: o.mode,
		SnapshotMode: o.snapshotMode, MemoryFallback: o.memoryFallback,
		MaxPause: o.maxPause, MaxLayers: o.maxLayers, KeepLocal: o.keepLocal, KeepLocalMaxSize: o.keepLocalMax,
		DiskReserve: o.diskReserve, MemoryRestoreBase: o.memoryRestoreBase, MemoryAnonymousPull: o.anonymousPull,
	}
}

func execute(ctx context.Context, o options, params *task.Params, cm *atomic.Pointer[committer.Committer]) error {
	cfg := committer.Config{Params: params, Namespace: o.namespace,
		CopyDir: o.copyDir, LayerDir: o.layerDir, CheckpointDir: o.checkpointDir}
	switch o.differ {
	case "auto":
	case "walking":
		cfg.WalkingDiffer = true
	default:
		return fmt.Errorf("invalid parameters: --differ must be auto or walking, got %q", o.differ)
	}
	var errs []error
	var err error
	if o.scratchLimit != "" {
		if cfg.ScratchLimit, err = strconv.ParseUint(o.scratchLimit, 10, 64); err != nil {
			errs = append(errs, fmt.Errorf("--scratch-limit: %q is not a number of bytes", o.scratchLimit))
		}
	}
	if cfg.RootCAs, err = upload.LoadRootCAs(o.registryCADir); err != nil {
		errs = append(errs, fmt.Errorf("--registry-ca-dir: %w", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid parameters: %w", errors.Join(errs...))
	}
	if params.Mode == task.ModeCommit {
		// The push step pushes with them; the commit step reads a base image
		// from its registry when containerd no longer holds its record.
		kc, err := dockerconfig.Load(o.dockerConfig)
		if err != nil {
			return err
		}
		cfg.Keychain = kc
	}
	if params.Mode != task.ModeCommit && o.step == stepPush {
		fmt.Fprintf(os.Stderr, "committer: mode=%s, nothing to push\n", params.Mode)
		return errors.Join(committer.WriteResult(o.digestsPath, ""), committer.WriteResult(o.imgsP, ""))
	}

	cl, err := client.New(o.address, client.WithDefaultNamespace(o.namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("connecting to containerd at %s: %w", o.address, err)
	}
	// The client is not closed: a signal handler may still need it to thaw,
	// and the process exits right after.
	c := committer.New(cl, cfg)
	cm.Store(c)
	if o.step != stepPush {
		// Every run on the node, of any mode, removes the memory snapshots
		// runs that are over left.
		c.SweepCheckpoints(ctx)
	}

	switch params.Mode {
	case task.ModeRelease:
		removed, marked, err := c.Release(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "committer: mode=release: removed %d kept image(s) of run %s, marked %d still in use\n", removed, params.RunID, marked)
		return errors.Join(committer.WriteResult(o.pauseWindowPath, "0"),
			committer.WriteResult(o.digestsPath, ""), committer.WriteResult(o.imgsP, ""))
	case task.ModeUnpause:
		n, err := c.Unpause(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "committer: mode=unpause: thawed %d containers of pod %s/%s\n", n, params.PodNamespace, params.PodName)
		return errors.Join(committer.WriteResult(o.pauseWindowPath, "0"),
			committer.WriteResult(o.digestsPath, ""), committer.WriteResult(o.imgsP, ""))
	}

	if o.step == stepCommit || o.step == stepAll {
		res, err := c.Snapshot(ctx)
		if err != nil {
			return err
		}
		if err := errors.Join(committer.WriteResult(o.pauseWindowPath, committer.FormatPauseWindow(res.PauseWindow.Milliseconds())),
			committer.WriteResult(o.snapshotModePath, res.Mode)); err != nil {
			return err
		}
	}
	if o.step == stepPush || o.step == stepAll {
		pushed, _, err := c.Push(ctx)
		if err != nil {
			return err
		}
		if err := errors.Join(committer.WriteResult(o.digestsPath, committer.FormatDigests(pushed)),
			committer.WriteResult(o.imgsP, committer.FormatImages(pushed))); err != nil {
			return err
		}
	}
	return nil
}
