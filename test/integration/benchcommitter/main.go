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

// Command benchcommitter compares the committer with nerdctl (commit + push)
// on one private containerd and one loopback registry: pause window and total
// commit+push time for diffs of several sizes. It needs root. Run it through
// hack/bench-committer.sh.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	eventtypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/typeurl/v2"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

func main() {
	committerBin := flag.String("committer", "", "committer binary")
	nerdctlBin := flag.String("nerdctl", "", "nerdctl binary (empty: skip the comparison)")
	sizes := flag.String("sizes-mib", "1,64", "diff sizes in MiB, comma-separated")
	iterations := flag.Int("iterations", 3, "runs per size and tool; the median is reported")
	flag.Parse()
	if err := run(*committerBin, *nerdctlBin, *sizes, *iterations); err != nil {
		fmt.Fprintln(os.Stderr, "benchcommitter:", err)
		os.Exit(1)
	}
}

type sample struct {
	pause    time.Duration // from containerd's paused/resumed events
	reported time.Duration // PAUSE_WINDOW_MS (committer only)
	total    time.Duration
}

func run(committerBin, nerdctlBin, sizesFlag string, iterations int) error {
	if committerBin == "" {
		return fmt.Errorf("--committer is required")
	}
	ctrd, err := ctrharness.Start(ctrharness.Bin())
	if err != nil {
		return err
	}
	defer ctrd.Stop()
	reg := ctrharness.NewRegistry()
	defer reg.Close()
	fmt.Printf("%s\n", ctrd.Version)
	ctx := ctrd.Ctx(context.Background())
	base := reg.Host + "/base/busybox:1"
	img, err := ctrharness.BusyboxImage(true)
	if err != nil {
		return err
	}
	if err := ctrharness.PushImage(base, img); err != nil {
		return err
	}
	if _, err := ctrd.Pull(ctx, base); err != nil {
		return err
	}
	ev := newPauseWatcher(ctx, ctrd)

	tools := []string{"committer"}
	if nerdctlBin != "" {
		tools = append(tools, "nerdctl")
	}
	results := map[string]map[string][]sample{}
	var sizes []int
	for _, s := range strings.Split(sizesFlag, ",") {
		mib, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("bad size %q", s)
		}
		sizes = append(sizes, mib)
	}
	work, err := os.MkdirTemp("", "bench-committer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	for _, mib := range sizes {
		key := fmt.Sprintf("%d MiB", mib)
		results[key] = map[string][]sample{}
		for i := 0; i < iterations; i++ {
			for _, tool := range tools {
				s, err := once(ctx, ctrd, reg, base, ev, tool, committerBin, nerdctlBin, work, mib, i)
				if err != nil {
					return fmt.Errorf("%s %s run %d: %w", tool, key, i, err)
				}
				results[key][tool] = append(results[key][tool], s)
				fmt.Printf("  %-9s %6s run %d: pause %7.1f ms (self-reported %s), commit+push %7.1f ms\n", tool, key, i,
					ms(s.pause), reportedStr(s), ms(s.total))
			}
		}
	}

	fmt.Printf("\nmedians over %d runs (%s)\n", iterations, ctrd.Version)
	fmt.Printf("%-8s %-10s %14s %18s\n", "diff", "tool", "pause window", "commit+push")
	for _, mib := range sizes {
		key := fmt.Sprintf("%d MiB", mib)
		for _, tool := range tools {
			p, t := median(results[key][tool])
			fmt.Printf("%-8s %-10s %11.1f ms %15.1f ms\n", key, tool, ms(p), ms(t))
		}
		if len(tools) == 2 {
			cp, ct := median(results[key]["committer"])
			np, nt := median(results[key]["nerdctl"])
			fmt.Printf("%-8s %-10s %13.2fx %17.2fx   (nerdctl / committer)\n", key, "ratio", ms(np)/ms(cp), ms(nt)/ms(ct))
		}
	}
	return nil
}

func reportedStr(s sample) string {
	if s.reported == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%d ms", s.reported.Milliseconds())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(ss []sample) (time.Duration, time.Duration) {
	var p, t []time.Duration
	for _, s := range ss {
		p, t = append(p, s.pause), append(t, s.total)
	}
	sort.Slice(p, func(i, j int) bool { return p[i] < p[j] })
	sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	return p[len(p)/2], t[len(t)/2]
}

// once runs one container with a diff of mib MiB and commits+pushes it.
func once(ctx context.Context, ctrd *ctrharness.Containerd, reg *ctrharness.Registry, base string, ev *pauseWatcher,
	tool, committerBin, nerdctlBin, work string, mib, iter int) (sample, error) {
	pod := fmt.Sprintf("bench-%s-%d-%d", tool, mib, iter)
	id := pod + "-app"
	ctr, task, err := ctrd.Run(ctx, ctrharness.PodContainer{ID: id, Pod: pod, PodNamespace: "bench", PodUID: "uid-" + pod, Name: "app", Image: base}, nil)
	if err != nil {
		return sample{}, err
	}
	defer ctrd.DeleteContainer(ctx, ctr)
	if err := writeRandom(fmt.Sprintf("/proc/%d/root/data/blob.bin", task.Pid()), int64(mib)<<20); err != nil {
		return sample{}, err
	}
	ref := fmt.Sprintf("%s/bench/%s:%d", reg.Host, pod, iter)
	var s sample
	start := time.Now()
	switch tool {
	case "committer":
		res := filepath.Join(work, pod+".pause")
		cmd := exec.Command(committerBin, "--step=all", "--pod-name="+pod, "--pod-namespace=bench", "--pod-uid=uid-"+pod, "--run-id=run-"+pod,
			"--insecure-registry=true", "--containerd-address="+ctrd.Address, "--pause-window-result="+res, "app="+ref)
		if out, err := cmd.CombinedOutput(); err != nil {
			return s, fmt.Errorf("%v\n%s", err, out)
		}
		s.total = time.Since(start)
		b, err := os.ReadFile(res)
		if err != nil {
			return s, err
		}
		n, _ := strconv.Atoi(string(b))
		s.reported = time.Duration(n) * time.Millisecond
	case "nerdctl":
		common := []string{"--address", ctrd.Address, "--namespace", ctrharness.Namespace, "--data-root", filepath.Join(work, "nerdctl"), "--insecure-registry"}
		commit := exec.Command(nerdctlBin, append(common, "commit", id, ref)...)
		if out, err := commit.CombinedOutput(); err != nil {
			return s, fmt.Errorf("nerdctl commit: %v\n%s", err, out)
		}
		push := exec.Command(nerdctlBin, append(common, "push", ref)...)
		if out, err := push.CombinedOutput(); err != nil {
			return s, fmt.Errorf("nerdctl push: %v\n%s", err, out)
		}
		s.total = time.Since(start)
		_ = ctrd.Client.ImageService().Delete(ctx, ref)
	}
	p, err := ev.window(id, 5*time.Second)
	if err != nil {
		return s, err
	}
	s.pause = p
	return s, nil
}

func writeRandom(path string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for written := int64(0); written < size; written += int64(len(buf)) {
		_, _ = rand.Read(buf)
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return f.Sync()
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
