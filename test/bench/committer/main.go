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

// Command bench-committer compares the committer with nerdctl (commit + push)
// on one private containerd and one loopback registry, on base images shaped
// like sandbox images and diffs of several shapes. For each case it reports
// medians of: the pause window, commit+push time, bytes the registry received
// for a first and a second snapshot of the same sandbox, the compressed diff,
// the resume time on the same node and on a node holding only the base image,
// the tool's peak memory and the node disk the snapshot keeps. It needs root.
// Run it through test/bench/committer/run.sh.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	eventtypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/typeurl/v2"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

func main() {
	o := opts{}
	flag.StringVar(&o.committer, "committer", "", "committer binary")
	flag.StringVar(&o.nerdctl, "nerdctl", "", "nerdctl binary (empty: skip the comparison)")
	flag.StringVar(&o.bases, "bases", "busybox,large", "base images: busybox (one small layer) and/or large")
	flag.StringVar(&o.diffs, "diffs", "1m,64m,1g,replace", "diff shapes: 1m (1 MiB in 10 files), 64m (64 MiB in 1,000 files), 1g (1 GiB in 10,000 files), replace (deletes and replaces base files and directories)")
	flag.IntVar(&o.iterations, "iterations", 3, "runs per case and tool; medians are reported")
	flag.IntVar(&o.largeFiles, "large-files", 40000, "files in the large base image")
	flag.Int64Var(&o.largeMiB, "large-mib", 1024, "MiB of file content in the large base image")
	flag.IntVar(&o.largeLayers, "large-layers", 4, "generated layers of the large base image (plus the busybox layer)")
	flag.BoolVar(&o.verbose, "verbose", false, "print the committer's log of every run")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-committer:", err)
		os.Exit(1)
	}
}

type opts struct {
	committer, nerdctl, bases, diffs string
	iterations, largeFiles           int
	largeMiB                         int64
	largeLayers                      int
	verbose                          bool
}

// sample is one snapshot run of one tool on one case.
type sample struct {
	pause, total              time.Duration
	up1, up2, layer           int64
	resumeLocal, resumeRemote time.Duration
	// startPresent is a start from the base image, already present, timed
	// in turn with resumeLocal, under the same load.
	startPresent      time.Duration
	rssKiB, diskBytes int64
	reportedPause     time.Duration
}

type env struct {
	o       opts
	ctrd    *ctrharness.Containerd
	ctx     context.Context
	reg     *countingRegistry
	ev      *pauseWatcher
	work    string
	baseRef map[string]string
	// baseFiles lists regular files of each base (paths inside the image).
	baseFiles map[string][]string
}

func run(o opts) error {
	if o.committer == "" {
		return fmt.Errorf("--committer is required")
	}
	work, err := os.MkdirTemp("", "bench-committer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	ctrd, err := ctrharness.Start(ctrharness.Bin())
	if err != nil {
		return err
	}
	defer ctrd.Stop()
	reg, err := newCountingRegistry(filepath.Join(work, "registry"))
	if err != nil {
		return err
	}
	defer reg.Close()
	e := &env{o: o, ctrd: ctrd, ctx: ctrd.Ctx(context.Background()), reg: reg, work: work,
		baseRef: map[string]string{}, baseFiles: map[string][]string{}}
	e.ev = newPauseWatcher(e.ctx, ctrd)
	fmt.Printf("%s; %d iterations\n", ctrd.Version, o.iterations)

	bases := strings.Split(o.bases, ",")
	for _, b := range bases {
		start := time.Now()
		if err := e.prepareBase(b); err != nil {
			return fmt.Errorf("base %s: %w", b, err)
		}
		fmt.Printf("base %s ready (%d files) in %s\n", b, len(e.baseFiles[b]), time.Since(start).Round(time.Second))
	}
	startRef := map[string]time.Duration{}
	for _, b := range bases {
		var ds []time.Duration
		for i := 0; i < 3; i++ {
			d, err := e.timeStart(e.baseRef[b], fmt.Sprintf("ref-%s-%d", b, i))
			if err != nil {
				return err
			}
			ds = append(ds, d)
		}
		startRef[b] = ctrharness.Median(ds)
	}

	tools := []string{"committer"}
	if o.nerdctl != "" {
		tools = append(tools, "nerdctl")
	}
	type key struct{ base, diff, tool string }
	results := map[key][]sample{}
	diffs := strings.Split(o.diffs, ",")
	for _, b := range bases {
		for _, d := range diffs {
			for i := 0; i < o.iterations; i++ {
				for _, tool := range tools {
					s, err := e.once(b, d, tool, i)
					if err != nil {
						return fmt.Errorf("%s on %s, diff %s, run %d: %w", tool, b, d, i, err)
					}
					results[key{b, d, tool}] = append(results[key{b, d, tool}], s)
					fmt.Printf("  %-8s %-8s %-9s run %d: pause %8.1f ms (self-reported %d ms), commit+push %8.1f ms, up %s/%s MiB, layer %s MiB, resume %.0f/%.0f ms (present %.0f ms), rss %d MiB, disk %s MiB\n",
						b, d, tool, i, ms(s.pause), s.reportedPause.Milliseconds(), ms(s.total), mib(s.up1), mib(s.up2), mib(s.layer),
						ms(s.resumeLocal), ms(s.resumeRemote), ms(s.startPresent), s.rssKiB>>10, mib(s.diskBytes))
				}
			}
		}
	}

	fmt.Printf("\nmedians of %d runs, %s\n", o.iterations, ctrd.Version)
	for _, b := range bases {
		fmt.Printf("pod start from the %s base image already present, idle: %.0f ms\n", b, ms(startRef[b]))
	}
	fmt.Printf("\n| base | diff | tool | pause window ms | commit+push ms | uploaded 1st MiB | uploaded 2nd MiB | compressed diff MiB | resume same node ms | start, image present ms | resume base-only node ms | peak RSS MiB | disk kept MiB |\n")
	fmt.Printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	med := map[key]sample{}
	for _, b := range bases {
		for _, d := range diffs {
			for _, tool := range tools {
				m := medianSample(results[key{b, d, tool}])
				med[key{b, d, tool}] = m
				fmt.Printf("| %s | %s | %s | %.1f | %.0f | %s | %s | %s | %.0f | %.0f | %.0f | %d | %s |\n", b, d, tool, ms(m.pause), ms(m.total),
					mib(m.up1), mib(m.up2), mib(m.layer), ms(m.resumeLocal), ms(m.startPresent), ms(m.resumeRemote), m.rssKiB>>10, mib(m.diskBytes))
			}
		}
	}
	fmt.Printf("\nratios (goal in brackets)\n")
	if c, ok := med[key{"large", "1m", "committer"}]; ok {
		fmt.Printf("  committer pause, 1m on large: %.1f ms [<= 50 ms]\n", ms(c.pause))
		if s, ok := med[key{"busybox", "1m", "committer"}]; ok {
			fmt.Printf("  committer pause, 1m on large / on busybox: %.2fx [<= 1.5x]\n", ms(c.pause)/ms(s.pause))
		}
	}
	for _, b := range bases {
		for _, d := range diffs {
			c := med[key{b, d, "committer"}]
			fmt.Printf("  %-8s %-8s uploaded 1st / compressed diff %.2fx [<= 1.1x]; same-node resume / start, image present %.2fx [<= 1.2x]",
				b, d, float64(c.up1)/float64(max(c.layer, 1)), ms(c.resumeLocal)/ms(c.startPresent))
			if n, ok := med[key{b, d, "nerdctl"}]; ok {
				fmt.Printf("; nerdctl/committer pause %.1fx [>= 10x], committer/nerdctl commit+push %.2fx [<= 0.5x]",
					ms(n.pause)/ms(c.pause), ms(c.total)/ms(n.total))
			}
			fmt.Println()
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) }

// medianSample takes the median of every field on its own.
func medianSample(ss []sample) sample {
	pick := func(f func(sample) time.Duration) time.Duration { return ctrharness.MedianOf(ss, f) }
	pickN := func(f func(sample) int64) int64 { return ctrharness.MedianOf(ss, f) }
	return sample{
		pause:         pick(func(s sample) time.Duration { return s.pause }),
		total:         pick(func(s sample) time.Duration { return s.total }),
		resumeLocal:   pick(func(s sample) time.Duration { return s.resumeLocal }),
		resumeRemote:  pick(func(s sample) time.Duration { return s.resumeRemote }),
		startPresent:  pick(func(s sample) time.Duration { return s.startPresent }),
		reportedPause: pick(func(s sample) time.Duration { return s.reportedPause }),
		up1:           pickN(func(s sample) int64 { return s.up1 }),
		up2:           pickN(func(s sample) int64 { return s.up2 }),
		layer:         pickN(func(s sample) int64 { return s.layer }),
		rssKiB:        pickN(func(s sample) int64 { return s.rssKiB }),
		diskBytes:     pickN(func(s sample) int64 { return s.diskBytes }),
	}
}

// prepareBase builds a base image, pushes it to the registry and pulls it.
func (e *env) prepareBase(b string) error {
	img, err := ctrharness.BusyboxImage(true)
	if err != nil {
		return err
	}
	files := []string{"bin/busybox"}
	if b == "large" {
		img, files, err = largeImage(img, filepath.Join(e.work, "base-large"), e.o.largeFiles, e.o.largeMiB<<20, e.o.largeLayers)
		if err != nil {
			return err
		}
	} else if b != "busybox" {
		return fmt.Errorf("unknown base %q", b)
	}
	ref := e.reg.Host + "/base/" + b + ":1"
	if err := ctrharness.PushImage(ref, img); err != nil {
		return err
	}
	if _, err := e.ctrd.Pull(e.ctx, ref); err != nil {
		return err
	}
	e.baseRef[b], e.baseFiles[b] = ref, files
	return nil
}

// timeStart creates and starts a container from ref, pulling and unpacking
// it first when containerd does not hold it, and returns the time taken.
func (e *env) timeStart(ref, id string) (time.Duration, error) {
	start := time.Now()
	if _, err := e.ctrd.Client.ImageService().Get(e.ctx, ref); err != nil {
		if _, err := e.ctrd.Pull(e.ctx, ref); err != nil {
			return 0, fmt.Errorf("pulling %s: %w", ref, err)
		}
	}
	ctr, _, err := e.ctrd.Run(e.ctx, ctrharness.PodContainer{ID: id, Pod: id, PodNamespace: "bench", Name: "app", Image: ref}, nil)
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	return d, e.ctrd.DeleteContainer(e.ctx, ctr)
}

// resumeSamples is how many same-node resumes each run times.
const resumeSamples = 5

// once snapshots one sandbox twice with one tool and resumes it.
func (e *env) once(base, shape, tool string, iter int) (sample, error) {
	var s sample
	pod := fmt.Sprintf("bench-%s-%s-%s-%d", base, shape, tool, iter)
	id := pod + "-app"
	ctr, task, err := e.ctrd.Run(e.ctx, ctrharness.PodContainer{ID: id, Pod: pod, PodNamespace: "bench", PodUID: "uid-" + pod, Name: "app", Image: e.baseRef[base]}, nil)
	if err != nil {
		return s, err
	}
	defer e.ctrd.DeleteContainer(e.ctx, ctr)
	root := fmt.Sprintf("/proc/%d/root", task.Pid())
	if err := e.writeDiff(root, base, shape, iter); err != nil {
		return s, fmt.Errorf("writing the diff: %w", err)
	}
	repo := fmt.Sprintf("%s/bench/%s", e.reg.Host, pod)
	diskBefore, err := dirBytes(filepath.Join(e.ctrd.Dir, "root"))
	if err != nil {
		return s, err
	}
	var refs []string
	for snap := 1; snap <= 2; snap++ {
		if snap == 2 {
			// The sandbox ran on: a little more changed before the second snapshot.
			if err := writeFiles(filepath.Join(root, "data/second"), 10, 100<<10, uint64(iter)+99); err != nil {
				return s, err
			}
		}
		ref := fmt.Sprintf("%s:%d", repo, snap)
		refs = append(refs, ref)
		// A pause usually comes long after the sandbox wrote its files, which
		// are on disk by then. Here the diff was just written, and the last
		// run's images were just deleted: flush both first, so that neither
		// tool's snapshot is timed while the kernel writes them out.
		syscall.Sync()
		e.ev.reset(id)
		up := e.reg.uploaded.Load()
		total, rss, reported, err := e.snapshot(tool, pod, id, ref)
		if err != nil {
			return s, fmt.Errorf("snapshot %d: %w", snap, err)
		}
		pause, err := e.ev.window(id, 10*time.Second)
		if err != nil {
			return s, err
		}
		if snap == 1 {
			s.total, s.pause, s.rssKiB, s.reportedPause = total, pause, rss, reported
			s.up1 = e.reg.uploaded.Load() - up
			if s.layer, err = lastLayerSize(ref); err != nil {
				return s, err
			}
			diskAfter, err := dirBytes(filepath.Join(e.ctrd.Dir, "root"))
			if err != nil {
				return s, err
			}
			s.diskBytes = diskAfter - diskBefore
		} else {
			s.up2 = e.reg.uploaded.Load() - up
		}
	}
	last := refs[len(refs)-1]
	// Right after a snapshot the node still flushes its writes, which slows
	// every container start: the same-node resume is timed in turn with
	// starts from the base image, already present, and each is the median
	// of resumeSamples.
	var local, present []time.Duration
	for i := range resumeSamples {
		d, err := e.timeStart(e.baseRef[base], fmt.Sprintf("%s-present-%d", pod, i))
		if err != nil {
			return s, fmt.Errorf("start from the base: %w", err)
		}
		present = append(present, d)
		if d, err = e.timeStart(last, fmt.Sprintf("%s-resume-local-%d", pod, i)); err != nil {
			return s, fmt.Errorf("same-node resume: %w", err)
		}
		local = append(local, d)
	}
	s.resumeLocal, s.startPresent = ctrharness.Median(local), ctrharness.Median(present)
	e.dropImages(refs)
	if s.resumeRemote, err = e.timeStart(last, pod+"-resume-remote"); err != nil {
		return s, fmt.Errorf("base-only-node resume: %w", err)
	}
	e.dropImages(refs)
	return s, nil
}

// dropImages removes every image record naming the snapshot images (by tag
// and by digest), synchronously garbage collecting their content.
func (e *env) dropImages(refs []string) {
	is := e.ctrd.Client.ImageService()
	all, _ := is.List(e.ctx)
	for _, ref := range refs {
		repo := ref[:strings.LastIndex(ref, ":")]
		for _, img := range all {
			if img.Name == ref || strings.HasPrefix(img.Name, repo+"@") {
				_ = is.Delete(e.ctx, img.Name, images.SynchronousDelete())
			}
		}
	}
}

// snapshot runs one tool's commit+push and returns its wall time, peak RSS
// and the pause window it reports itself (committer only).
func (e *env) snapshot(tool, pod, id, ref string) (time.Duration, int64, time.Duration, error) {
	start := time.Now()
	var rss int64
	switch tool {
	case "committer":
		res := filepath.Join(e.work, pod+".pause")
		// The upper directories are readable here, as they are to the Task's
		// commit step, which mounts the node's overlayfs snapshots.
		cmd := exec.Command(e.o.committer, "--step=all", "--pod-name="+pod, "--pod-namespace=bench", "--pod-uid=uid-"+pod, "--run-id=run-"+pod,
			"--insecure-registry=true", "--containerd-address="+e.ctrd.Address, "--pause-window-result="+res,
			"--copy-dir="+e.work, "--layer-dir="+e.work, "app="+ref)
		out, peak, err := runMeasured(cmd)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%v\n%s", err, out)
		}
		total := time.Since(start)
		rss = peak
		if e.o.verbose {
			os.Stderr.Write(out)
		}
		b, err := os.ReadFile(res)
		if err != nil {
			return 0, 0, 0, err
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return total, rss, time.Duration(n) * time.Millisecond, nil
	case "nerdctl":
		common := []string{"--address", e.ctrd.Address, "--namespace", ctrharness.Namespace, "--data-root", filepath.Join(e.work, "nerdctl"), "--insecure-registry"}
		for _, args := range [][]string{{"commit", id, ref}, {"push", ref}} {
			cmd := exec.Command(e.o.nerdctl, append(common, args...)...)
			out, peak, err := runMeasured(cmd)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("nerdctl %s: %v\n%s", args[0], err, out)
			}
			rss = max(rss, peak)
		}
		return time.Since(start), rss, 0, nil
	}
	return 0, 0, 0, fmt.Errorf("unknown tool %q", tool)
}

// runMeasured runs cmd and returns its output and its peak resident memory
// in KiB, polled from /proc every 5 ms (a child's rusage would count the
// memory of this process at fork).
func runMeasured(cmd *exec.Cmd) ([]byte, int64, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var peak int64
	for {
		if b, err := os.ReadFile(status); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
					peak = max(peak, n)
				}
			}
		}
		select {
		case err := <-done:
			return out.Bytes(), peak, err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// writeDiff makes one of the diff shapes in a container's root filesystem.
func (e *env) writeDiff(root, base, shape string, iter int) error {
	seed := uint64(iter)
	switch shape {
	case "1m":
		return writeFiles(filepath.Join(root, "data/d1m"), 10, 100<<10+4<<10, seed)
	case "64m":
		return writeFiles(filepath.Join(root, "data/d64m"), 1000, 64<<10+1<<9, seed)
	case "1g":
		return writeFiles(filepath.Join(root, "data/d1g"), 10000, 100<<10+7<<8, seed)
	case "replace":
		return replaceBase(root, base, e.baseFiles[base], seed)
	}
	return fmt.Errorf("unknown diff shape %q", shape)
}

// replaceBase deletes and replaces base files and directories: whole
// directories removed, some recreated with new content (opaque), files
// overwritten, files deleted, a symlink replaced by a file.
func replaceBase(root, base string, files []string, seed uint64) error {
	if base == "busybox" {
		for _, p := range []string{"bin/cat", "bin/ls"} {
			if err := os.Remove(filepath.Join(root, p)); err != nil {
				return err
			}
		}
		if err := os.RemoveAll(filepath.Join(root, "etc")); err != nil {
			return err
		}
		if err := writeFiles(filepath.Join(root, "etc"), 3, 1<<10, seed); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(root, "bin/ls"), []byte("#!/bin/sh\necho replaced\n"), 0o755)
	}
	for i := 0; i < 20; i++ {
		dir := filepath.Join(root, fmt.Sprintf("usr/lib/pkg%04d", i))
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if i < 10 {
			if err := writeFiles(dir, 5, 8<<10, seed+uint64(i)); err != nil {
				return err
			}
		}
	}
	n := 0
	for _, f := range files {
		if !strings.HasPrefix(f, "usr/lib/pkg01") {
			continue
		}
		p := filepath.Join(root, f)
		if n%2 == 0 {
			if err := os.WriteFile(p, []byte(fmt.Sprintf("replaced %d %d\n", seed, n)), 0o644); err != nil {
				return err
			}
		} else if err := os.Remove(p); err != nil {
			return err
		}
		if n++; n == 200 {
			break
		}
	}
	return nil
}

// writeFiles writes n files of size bytes of pseudo-random (incompressible)
// data into dir.
func writeFiles(dir string, n, size int, seed uint64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	buf := make([]byte, size)
	for i := 0; i < n; i++ {
		for j := 0; j+8 <= len(buf); j += 8 {
			v := r.Uint64()
			for k := 0; k < 8; k++ {
				buf[j+k] = byte(v >> (8 * k))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d.bin", i)), buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// dirBytes sums the allocated bytes of every file under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n, err
}

// lastLayerSize returns the compressed size of the top layer of ref.
func lastLayerSize(ref string) (int64, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return 0, err
	}
	img, err := remote.Image(r)
	if err != nil {
		return 0, err
	}
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	return m.Layers[len(m.Layers)-1].Size, nil
}

// countingRegistry is a loopback registry keeping blobs on disk and counting
// the request body bytes it receives (blob uploads and manifests).
type countingRegistry struct {
	*httptest.Server
	Host     string
	uploaded atomic.Int64
}

func newCountingRegistry(dir string) (*countingRegistry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &countingRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)))
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Body != nil && req.Method != http.MethodGet && req.Method != http.MethodHead {
			req.Body = &countingBody{ReadCloser: req.Body, n: &r.uploaded}
		}
		h.ServeHTTP(w, req)
	}))
	r.Host = strings.TrimPrefix(r.URL, "http://")
	return r, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

// Read implements io.Reader.
func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// pauseWatcher records containerd's TaskPaused/TaskResumed event times, so
// both tools' pause windows are measured the same way, by the daemon.
type pauseWatcher struct {
	mu      sync.Mutex
	paused  map[string]time.Time
	resumed map[string]time.Time
}

func newPauseWatcher(ctx context.Context, ctrd *ctrharness.Containerd) *pauseWatcher {
	w := &pauseWatcher{paused: map[string]time.Time{}, resumed: map[string]time.Time{}}
	ch, _ := ctrd.Client.EventService().Subscribe(ctx, `topic=="/tasks/paused"`, `topic=="/tasks/resumed"`)
	go func() {
		for e := range ch {
			v, err := typeurl.UnmarshalAny(e.Event)
			if err != nil {
				continue
			}
			w.mu.Lock()
			switch ev := v.(type) {
			case *eventtypes.TaskPaused:
				w.paused[ev.ContainerID] = e.Timestamp
			case *eventtypes.TaskResumed:
				w.resumed[ev.ContainerID] = e.Timestamp
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *pauseWatcher) reset(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.paused, id)
	delete(w.resumed, id)
}

func (w *pauseWatcher) window(id string, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		p, okp := w.paused[id]
		r, okr := w.resumed[id]
		w.mu.Unlock()
		if okp && okr {
			return r.Sub(p), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("no paused/resumed events for %s", id)
}
