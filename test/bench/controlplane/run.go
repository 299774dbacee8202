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

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	pipelineinformers "github.com/tektoncd/pipeline/pkg/client/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/apis"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	sandboxinformers "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/informers/externalversions"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/proc"
)

// Modes of a result: this controller's burst, the write-only client's, or
// OpenSandbox's controller's burst.
const (
	modeBurst       = ""
	modeLimit       = "limit"
	modeOpenSandbox = "opensandbox"
)

// result is what one run measured; bench report prints it.
type result struct {
	// Mode is modeBurst, modeLimit or modeOpenSandbox.
	Mode string `json:"mode,omitempty"`
	// Trial numbers the runs of one size, from 1.
	Trial      int `json:"trial"`
	N          int `json:"n"`
	Containers int `json:"containers"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	Unfinished int `json:"unfinished"`
	// Failures are the Failed snapshots' reason and message, the warm-up's
	// included, one line per distinct message with its count.
	Failures map[string]int `json:"failures,omitempty"`

	// Seconds from a snapshot's creation (its create call returning) to the
	// harness seeing its TaskRun (OpenSandbox: its commit Job), and to the
	// harness seeing phase Succeed.
	ToTaskRun latency `json:"toTaskRun"`
	ToSucceed latency `json:"toSucceed"`

	// OverallRate is N over the time from the burst's start to the last
	// Succeed; SteadyRate is snapshots/s between the 10th and 90th
	// percentile of completions.
	SteadyRate  float64 `json:"steadyRate"`
	OverallRate float64 `json:"overallRate"`
	CreateSecs  float64 `json:"createSecs"`
	WallSecs    float64 `json:"wallSecs"`

	// Writes during the burst, the harness's own subtracted. ObjectWrites
	// are on snapshots, TaskRuns, BatchSandboxes and Jobs (not their
	// status), Events on core events, Conflicts all 409s; JobWrites are
	// those of OpenSandbox's commit Jobs that the Job controller and kwok
	// make (pods, Jobs' status, events.k8s.io events); Background is every
	// other write (leases, nodes...), not per snapshot.
	ObjectWrites float64      `json:"objectWrites"`
	Events       float64      `json:"events"`
	JobWrites    float64      `json:"jobWrites,omitempty"`
	Conflicts    float64      `json:"conflicts"`
	Background   float64      `json:"background"`
	Requests     []countEntry `json:"requests"`
	// Reads are the GETs and LISTs on snapshots, TaskRuns, Jobs,
	// BatchSandboxes, pods and Secrets during the burst, the harness's own
	// subtracted.
	Reads        float64      `json:"reads"`
	ReadRequests []countEntry `json:"readRequests"`
	// EventReasons counts the snapshots' Event objects by reason.
	EventReasons map[string]int32 `json:"eventReasons"`

	PeakRSSKiB       int64   `json:"peakRSSKiB"`
	CPUSecs          float64 `json:"cpuSecs"`
	ApiserverCPUSecs float64 `json:"apiserverCPUSecs"`
	EtcdCPUSecs      float64 `json:"etcdCPUSecs"`
	// HarnessCPUSecs is bench's own CPU time: the snapshots' creation, the
	// TaskRuns' completion and the watches (in limit mode, all the writes).
	HarnessCPUSecs float64 `json:"harnessCPUSecs"`
	// MachineBusyCores is how many of the machine's cores were busy on
	// average from the burst to the last Succeed (all processes).
	MachineBusyCores float64 `json:"machineBusyCores"`
	MachineCores     int     `json:"machineCores"`

	// limit and openSandbox are the write-only client's and OpenSandbox's
	// results of the same N and trial, which bench report pairs with a burst's.
	limit, openSandbox *result
}

type latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type countEntry struct {
	request
	Count float64 `json:"count"`
}

// timeline records, per snapshot name, when each step was seen.
type timeline struct {
	mu      sync.Mutex
	created map[string]time.Time
	taskRun map[string]time.Time
	done    map[string]time.Time
	phase   map[string]v1alpha1.SandboxSnapshotPhase
	message map[string]string
	changed chan struct{}
}

func newTimeline() *timeline {
	return &timeline{
		created: map[string]time.Time{}, taskRun: map[string]time.Time{}, done: map[string]time.Time{},
		phase: map[string]v1alpha1.SandboxSnapshotPhase{}, message: map[string]string{}, changed: make(chan struct{}, 1),
	}
}

// first records t under name in m unless something is there already.
func (tl *timeline) first(m map[string]time.Time, name string, t time.Time) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if _, ok := m[name]; ok {
		return false
	}
	m[name] = t
	return true
}

func (tl *timeline) finished(s *v1alpha1.SandboxSnapshot) {
	if s.Status.Phase != v1alpha1.PhaseSucceed && s.Status.Phase != v1alpha1.PhaseFailed {
		return
	}
	if !tl.first(tl.done, s.Name, time.Now()) {
		return
	}
	tl.mu.Lock()
	tl.phase[s.Name] = s.Status.Phase
	if c := s.Status.GetCondition(v1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
		tl.message[s.Name] = c.Reason + ": " + c.Message
	}
	for _, ctr := range s.Status.Containers {
		if s.Status.Phase == v1alpha1.PhaseSucceed && ctr.ImageDigest == "" {
			tl.phase[s.Name] = v1alpha1.PhaseFailed
			tl.message[s.Name] = "Succeed without the digest of container " + ctr.ContainerName
		}
	}
	tl.mu.Unlock()
	select {
	case tl.changed <- struct{}{}:
	default:
	}
}

// waitDone waits until every name has finished.
func (tl *timeline) waitDone(ctx context.Context, names []string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		tl.mu.Lock()
		left := 0
		for _, n := range names {
			if _, ok := tl.done[n]; !ok {
				left++
			}
		}
		tl.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-tl.changed:
		case <-time.After(time.Second):
		case <-deadline:
			return fmt.Errorf("%d of %d snapshots unfinished after %s", left, len(names), timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// run creates the warm-up snapshot, then N snapshots in one burst, plays
// Tekton by completing each TaskRun as soon as it appears, and measures.
func run(ctx context.Context, c *clients, o *options) error {
	return burst(ctx, c, o, modeBurst)
}

// openSandbox is run with OpenSandbox's controller: the harness plays the
// kubelet of its commit Jobs' pods instead.
func openSandbox(ctx context.Context, c *clients, o *options) error {
	return burst(ctx, c, o, modeOpenSandbox)
}

// burst measures the controller of mode on a warm-up snapshot and then N
// snapshots in one burst.
func burst(ctx context.Context, c *clients, o *options, mode string) error {
	ns := o.namespace()
	tl := newTimeline()
	stop := make(chan struct{})
	var completers sync.WaitGroup
	defer func() { close(stop); completers.Wait() }()

	// What runs each commit: 16 workers complete what the watches queue.
	work := make(chan func() error, 2*o.n+2)
	var watches []cache.SharedIndexInformer
	if mode == modeOpenSandbox {
		watches = kubeletPart(ctx, c, ns, tl, work)
	} else {
		watches = tektonPart(ctx, c, ns, tl, work)
	}
	completeErrs := make(chan error, 2*o.n+2)
	for range 16 {
		completers.Go(func() {
			for {
				select {
				case fn := <-work:
					if err := fn(); err != nil {
						completeErrs <- err
					}
				case <-stop:
					return
				}
			}
		})
	}

	// The snapshots' outcome.
	snapshots := sandboxinformers.NewSharedInformerFactoryWithOptions(c.sandbox, 0, sandboxinformers.WithNamespace(ns)).
		Sandbox().V1alpha1().SandboxSnapshots().Informer()
	onSnapshot := func(obj any) { tl.finished(obj.(*v1alpha1.SandboxSnapshot)) }
	_, _ = snapshots.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onSnapshot, UpdateFunc: func(_, obj any) { onSnapshot(obj) },
	})
	var synced []cache.InformerSynced
	for _, inf := range append(watches, snapshots) {
		go inf.Run(stop)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informers did not sync")
	}

	// Warm-up: the controller leads and its connections are open.
	start := time.Now()
	if err := createSnapshot(ctx, c, ns, 0, tl); err != nil {
		return err
	}
	if err := tl.waitDone(ctx, []string{snapshotName(0)}, o.timeout); err != nil {
		return fmt.Errorf("warm-up snapshot (does the controller run?): %w", err)
	}
	tl.mu.Lock()
	phase, msg := tl.phase[snapshotName(0)], tl.message[snapshotName(0)]
	tl.mu.Unlock()
	// A failed warm-up is a finding, not a reason to stop: the burst
	// shows whether it happens again.
	logf("run: warm-up snapshot ended %s after %.1fs %s", phase, time.Since(start).Seconds(), msg)

	quiesce(ctx, c)
	before, err := scrapeRequests(ctx, c)
	if err != nil {
		return err
	}
	ownBefore := c.own.snapshot()
	cpuBefore, apiCPUBefore, etcdCPUBefore, ownCPUBefore := proc.CPUSeconds(o.pid), proc.CPUSeconds(o.apiPid), proc.CPUSeconds(o.etcdPid), proc.OwnCPUSeconds()
	busyBefore, totalBefore := machineCPU()

	// The burst.
	names := make([]string, o.n)
	for i := range names {
		names[i] = snapshotName(i + 1)
	}
	burst := time.Now()
	if err := parallel(ctx, o.n, 64, func(i int) error { return createSnapshot(ctx, c, ns, i+1, tl) }); err != nil {
		return err
	}
	createSecs := time.Since(burst).Seconds()
	logf("run: %d snapshots created in %.2fs", o.n, createSecs)
	waitErr := tl.waitDone(ctx, names, o.timeout)
	wall := time.Since(burst).Seconds()
	cpu, apiCPU := proc.CPUSeconds(o.pid)-cpuBefore, proc.CPUSeconds(o.apiPid)-apiCPUBefore
	etcdCPU, ownCPU := proc.CPUSeconds(o.etcdPid)-etcdCPUBefore, proc.OwnCPUSeconds()-ownCPUBefore
	busy, total := machineCPU()
	if waitErr == nil {
		logf("run: all %d finished %.2fs after the burst began", o.n, wall)
	}

	quiesce(ctx, c)
	after, err := scrapeRequests(ctx, c)
	if err != nil {
		return err
	}
	requests := after.sub(before).sub(c.own.snapshot().sub(ownBefore))
	reasons, err := eventReasons(ctx, c, ns)
	if err != nil {
		return err
	}

	jobEvents := 0.0
	if mode == modeOpenSandbox {
		if jobEvents, err = jobEventWrites(ctx, c, ns); err != nil {
			return err
		}
	}

	res := result{Mode: mode, Trial: o.trial, N: o.n, Containers: o.containers, CreateSecs: createSecs, WallSecs: wall, EventReasons: reasons}
	res.PeakRSSKiB = proc.PeakRSSKiB(o.pid)
	res.CPUSecs, res.ApiserverCPUSecs, res.EtcdCPUSecs, res.HarnessCPUSecs = cpu, apiCPU, etcdCPU, ownCPU
	res.MachineCores = runtime.NumCPU()
	if total > totalBefore {
		res.MachineBusyCores = float64(res.MachineCores) * (busy - busyBefore) / (total - totalBefore)
	}
	res.measure(tl, names, burst)
	res.attribute(requests, jobEvents)

	select {
	case err := <-completeErrs:
		return fmt.Errorf("completing commits: %w", err)
	default:
	}
	if waitErr != nil {
		// Recorded as unfinished; bench report fails on it.
		logf("run: %v", waitErr)
	}
	return res.write(o.out)
}

func createSnapshot(ctx context.Context, c *clients, ns string, i int, tl *timeline) error {
	s := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: snapshotName(i), Namespace: ns},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: sandboxName(i)},
	}
	if _, err := c.sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating snapshot %s: %w", s.Name, err)
	}
	tl.first(tl.created, s.Name, time.Now())
	return nil
}

// tektonPart plays Tekton: each TaskRun of the snapshots of ns is completed
// once, at once.
func tektonPart(ctx context.Context, c *clients, ns string, tl *timeline, work chan<- func() error) []cache.SharedIndexInformer {
	taskRuns := pipelineinformers.NewSharedInformerFactoryWithOptions(c.pipeline, 0,
		pipelineinformers.WithNamespace(systemNamespace),
		pipelineinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = sandbox.SnapshotNamespaceLabel + "=" + ns }),
	).Tekton().V1().TaskRuns().Informer()
	_, _ = taskRuns.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		tr := obj.(*pipelinev1.TaskRun)
		if tl.first(tl.taskRun, tr.Labels[sandbox.SnapshotNameLabel], time.Now()) {
			work <- func() error { return complete(ctx, c, tr) }
		}
	}})
	return []cache.SharedIndexInformer{taskRuns}
}

// complete plays the sandbox-commit Task: Succeeded=True with one valid
// digest per item of the containers param, and a pause window.
func complete(ctx context.Context, c *clients, tr *pipelinev1.TaskRun) error {
	var digests []string
	for _, p := range tr.Spec.Params {
		if p.Name == task.ParamContainers {
			for _, item := range p.Value.ArrayVal {
				sum := sha256.Sum256([]byte(item))
				digests = append(digests, "sha256:"+hex.EncodeToString(sum[:]))
			}
		}
	}
	for attempt := 0; ; attempt++ {
		tr = tr.DeepCopy()
		now := metav1.Now()
		tr.Status.StartTime, tr.Status.CompletionTime = &now, &now
		tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue,
			Reason: string(pipelinev1.TaskRunReasonSuccessful), Message: "All Steps have completed executing"})
		tr.Status.Results = []pipelinev1.TaskRunResult{
			{Name: task.ResultDigests, Type: pipelinev1.ResultsTypeString, Value: *pipelinev1.NewStructuredValues(task.FormatDigests(digests))},
			{Name: task.ResultPauseWindowMS, Type: pipelinev1.ResultsTypeString, Value: *pipelinev1.NewStructuredValues("250")},
		}
		_, err := c.pipeline.TektonV1().TaskRuns(tr.Namespace).UpdateStatus(ctx, tr, metav1.UpdateOptions{})
		if !apierrs.IsConflict(err) || attempt == 5 {
			return err
		}
		if tr, err = c.pipeline.TektonV1().TaskRuns(tr.Namespace).Get(ctx, tr.Name, metav1.GetOptions{}); err != nil {
			return err
		}
	}
}

// quiesce waits until the writes on snapshots, TaskRuns, Jobs, pods,
// BatchSandboxes and events have stopped for 3 s (events are sent
// asynchronously, and the sink backs off after an error), for up to 30 s.
func quiesce(ctx context.Context, c *clients) {
	start := time.Now()
	last, still := -1.0, 0
	for time.Since(start) < 30*time.Second {
		now, err := scrapeRequests(ctx, c)
		if err != nil {
			return
		}
		total := 0.0
		for r, v := range now {
			if r.isWrite() && quiesceResources[r.Resource] {
				total += v
			}
		}
		if total == last {
			if still++; still == 3 {
				return
			}
		} else {
			last, still = total, 0
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return
		}
	}
	logf("run: writes still going on after %s", time.Since(start).Round(time.Second))
}

// quiesceResources are the resources whose writes quiesce waits out.
var quiesceResources = map[string]bool{"events": true, "sandboxsnapshots": true, "taskruns": true, "jobs": true, "pods": true, "batchsandboxes": true}

// eventReasons sums the count of the snapshots' events by reason, the
// warm-up snapshot's left out.
func eventReasons(ctx context.Context, c *clients, ns string) (map[string]int32, error) {
	events, err := c.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=SandboxSnapshot"})
	if err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, e := range events.Items {
		if e.InvolvedObject.Name != snapshotName(0) {
			out[e.Reason] += max(e.Count, 1)
		}
	}
	return out, nil
}

// measure fills in the latencies and rates.
func (res *result) measure(tl *timeline, names []string, burst time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var toTR, toDone, doneAt []float64
	for _, n := range names {
		created, ok := tl.created[n]
		if !ok {
			continue
		}
		if t, ok := tl.taskRun[n]; ok {
			toTR = append(toTR, t.Sub(created).Seconds())
		}
		switch tl.phase[n] {
		case v1alpha1.PhaseSucceed:
			res.Succeeded++
			toDone = append(toDone, tl.done[n].Sub(created).Seconds())
			doneAt = append(doneAt, tl.done[n].Sub(burst).Seconds())
		case v1alpha1.PhaseFailed:
			res.Failed++
			res.failure(tl.message[n])
		default:
			res.Unfinished++
		}
	}
	if tl.phase[snapshotName(0)] == v1alpha1.PhaseFailed {
		res.failure("warm-up " + tl.message[snapshotName(0)])
	}
	res.ToTaskRun, res.ToSucceed = summarize(toTR), summarize(toDone)
	sort.Float64s(doneAt)
	if k := len(doneAt); k > 0 {
		res.OverallRate = float64(k) / doneAt[k-1]
		lo, hi := k/10, k*9/10-1
		if hi > lo && doneAt[hi] > doneAt[lo] {
			res.SteadyRate = float64(hi-lo) / (doneAt[hi] - doneAt[lo])
		}
	}
}

// failure counts a failure message, with the snapshot-specific names
// folded away so that alike failures count together.
func (res *result) failure(msg string) {
	if res.Failures == nil {
		res.Failures = map[string]int{}
	}
	msg = snapshotNumber.ReplaceAllString(msg, "${1}NNNN")
	res.Failures[msg]++
}

var snapshotNumber = regexp.MustCompile(`(snap-|sb-)[0-9]{4}`)

// attribute splits the burst's writes into the controller's object writes,
// its events, the commit Jobs' writes (jobEvents of the events among them)
// and background writes.
func (res *result) attribute(requests counts, jobEvents float64) {
	for _, r := range requests.sorted() {
		v := requests[r]
		if r.isRead() && readResources[r.Resource] && v != 0 {
			res.ReadRequests = append(res.ReadRequests, countEntry{request: r, Count: v})
			res.Reads += v
		}
		if !r.isWrite() || v == 0 {
			continue
		}
		res.Requests = append(res.Requests, countEntry{request: r, Count: v})
		switch {
		case r.Resource == "events" && r.Group == "":
			res.Events += v
		case r.Resource == "sandboxsnapshots" || r.Resource == "taskruns" || r.Resource == "batchsandboxes" ||
			(r.Resource == "jobs" && r.Subresource == ""):
			res.ObjectWrites += v
		case r.Resource == "jobs" || r.Resource == "pods" || r.Resource == "events":
			res.JobWrites += v
		default:
			res.Background += v
		}
		if r.Code == "409" {
			res.Conflicts += v
		}
	}
	jobEvents = min(jobEvents, res.Events)
	res.Events -= jobEvents
	res.JobWrites += jobEvents
}

func (res *result) write(path string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if path == "" {
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// summarize returns the 50th and 99th percentile (nearest rank) and the maximum.
func summarize(xs []float64) latency {
	if len(xs) == 0 {
		return latency{}
	}
	sort.Float64s(xs)
	rank := func(p float64) float64 {
		i := int(p*float64(len(xs))+0.999999) - 1
		return xs[max(0, min(i, len(xs)-1))]
	}
	return latency{P50: rank(0.50), P99: rank(0.99), Max: xs[len(xs)-1]}
}

// machineCPU reads the busy and total jiffies of all CPUs from /proc/stat.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i >= 8 { // guest time is already in user time
			break
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// readResources are the resources whose reads count as the controller's.
var readResources = map[string]bool{"sandboxsnapshots": true, "taskruns": true, "jobs": true, "batchsandboxes": true, "pods": true, "secrets": true}
