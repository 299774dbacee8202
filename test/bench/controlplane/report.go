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
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

// goalSizes are the sizes each goal is checked at.
var goalSizes = map[int]bool{500: true, 1000: true}

// row is one figure of the table, read from any result: this controller's
// burst, the write-only client's run or OpenSandbox's burst. goal, if set,
// is checked at goalSizes on this controller's figure, or with ofLimit on
// its ratio to the write-only client's.
type row struct {
	name     string
	unit     string
	get      func(*result) float64
	decimals int
	goal     *goal
}

type goal struct {
	value   float64
	atLeast bool // a minimum (else a maximum)
	ofLimit bool
}

var nan = math.NaN()

// throughput is N over the time from the burst to the last Succeed.
func throughput(r *result) float64 { return r.OverallRate }

// succeedP99 is the 99th percentile of creation -> Succeed.
func succeedP99(r *result) float64 { return r.ToSucceed.P99 }

// p50OverWall is the median creation -> Succeed over the burst's wall time.
func p50OverWall(r *result) float64 { return r.ToSucceed.P50 / r.WallSecs }

// allCPU is the CPU time of kube-apiserver, etcd, the controller and the
// harness from the burst to the last Succeed.
func allCPU(r *result) float64 {
	return r.ApiserverCPUSecs + r.EtcdCPUSecs + r.CPUSecs + r.HarnessCPUSecs
}

var rows = []row{
	{name: "throughput (N / burst -> last Succeed)", unit: "snapshots/s", get: throughput,
		decimals: 1, goal: &goal{value: 0.8, atLeast: true, ofLimit: true}},
	{name: "throughput, middle 80% of completions", unit: "snapshots/s", get: func(r *result) float64 { return r.SteadyRate }, decimals: 1},
	{name: "creation -> TaskRun (OpenSandbox: Job), p50", unit: "s", get: func(r *result) float64 { return r.ToTaskRun.P50 }, decimals: 2},
	{name: "creation -> TaskRun (OpenSandbox: Job), p99", unit: "s", get: func(r *result) float64 { return r.ToTaskRun.P99 }, decimals: 2},
	{name: "creation -> Succeed, p50", unit: "s", get: func(r *result) float64 { return r.ToSucceed.P50 }, decimals: 2},
	{name: "creation -> Succeed, p99", unit: "s", get: succeedP99, decimals: 2},
	{name: "burst -> last Succeed (wall)", unit: "s", get: func(r *result) float64 { return r.WallSecs }, decimals: 2},
	{name: "creation -> Succeed p50 / wall", unit: "x", get: p50OverWall, decimals: 2, goal: &goal{value: 0.6}},
	{name: "object writes / snapshot", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.ObjectWrites) },
		decimals: 2, goal: &goal{value: 4}},
	{name: "events / snapshot (written)", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.Events) }, decimals: 2},
	{name: "events / snapshot (delivered)", unit: "", get: func(r *result) float64 { return perSnapshot(r, float64(delivered(r))) }, decimals: 2},
	{name: "API writes / snapshot (objects + events)", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.ObjectWrites+r.Events) },
		decimals: 2, goal: &goal{value: 5}},
	{name: "commit Jobs' writes / snapshot (Job controller, kwok)", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.JobWrites) }, decimals: 2},
	{name: "API reads / snapshot (GET, LIST)", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.Reads) }, decimals: 2},
	{name: "409 conflicts / snapshot", unit: "%", get: func(r *result) float64 { return 100 * perSnapshot(r, r.Conflicts) },
		decimals: 1, goal: &goal{value: 0}},
	{name: "controller peak RSS (VmHWM)", unit: "MiB", get: func(r *result) float64 { return float64(r.PeakRSSKiB) / 1024 }, decimals: 1},
	{name: "controller CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.CPUSecs }, decimals: 1},
	{name: "kube-apiserver CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.ApiserverCPUSecs }, decimals: 1},
	{name: "etcd CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.EtcdCPUSecs }, decimals: 1},
	{name: "harness CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.HarnessCPUSecs }, decimals: 1},
	{name: "CPU, apiserver + etcd + controller + harness", unit: "s", get: allCPU, decimals: 1},
	{name: "machine cores busy, burst -> last Succeed", unit: "cores", get: func(r *result) float64 { return r.MachineBusyCores }, decimals: 2},
	{name: "snapshots Succeed / N", unit: "%", get: func(r *result) float64 { return 100 * perSnapshot(r, float64(r.Succeeded)) },
		decimals: 0, goal: &goal{value: 100, atLeast: true}},
}

func perSnapshot(r *result, v float64) float64 {
	if r.N == 0 {
		return nan
	}
	return v / float64(r.N)
}

// delivered counts the snapshots' Event objects' occurrences.
func delivered(r *result) int32 {
	var n int32
	for _, c := range r.EventReasons {
		n += c
	}
	return n
}

// trialKey names one trial of one size.
type trialKey struct{ n, trial int }

// loadResults reads result files and pairs each burst with the write-only
// client's and OpenSandbox's results of the same N and trial. It returns the
// bursts by N, in the order of their trials.
func loadResults(files []string) (map[int][]*result, error) {
	bursts, limits, openSandboxes := map[int][]*result{}, map[trialKey]*result{}, map[trialKey]*result{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := &result{}
		if err := json.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		switch r.Mode {
		case modeBurst:
			bursts[r.N] = append(bursts[r.N], r)
		case modeLimit:
			limits[trialKey{r.N, r.Trial}] = r
		case modeOpenSandbox:
			openSandboxes[trialKey{r.N, r.Trial}] = r
		default:
			return nil, fmt.Errorf("%s: unknown mode %q", f, r.Mode)
		}
	}
	for n, rs := range bursts {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Trial < rs[j].Trial })
		for _, r := range rs {
			r.limit, r.openSandbox = limits[trialKey{n, r.Trial}], openSandboxes[trialKey{n, r.Trial}]
		}
	}
	return bursts, nil
}

// mean is the mean of f over the trials rs, NaN without any or where f is
// NaN for one of them.
func mean(rs []*result, f func(*result) float64) float64 {
	if len(rs) == 0 {
		return nan
	}
	sum := 0.0
	for _, r := range rs {
		sum += f(r)
	}
	return sum / float64(len(rs))
}

// of reads get from a burst's paired result (pair picks it), NaN without one.
func of(pair func(*result) *result, get func(*result) float64) func(*result) float64 {
	return func(r *result) float64 {
		if p := pair(r); p != nil {
			return get(p)
		}
		return nan
	}
}

// over is get of a burst over get of its paired result, NaN where that is
// missing or zero.
func over(pair func(*result) *result, get func(*result) float64) func(*result) float64 {
	return func(r *result) float64 {
		p := pair(r)
		if p == nil || get(p) == 0 {
			return nan
		}
		return get(r) / get(p)
	}
}

func limitOf(r *result) *result       { return r.limit }
func openSandboxOf(r *result) *result { return r.openSandbox }

// report prints, per size, the results of files as a table: this
// controller's figures beside the write-only client's and OpenSandbox's,
// with the ratios ours / write-only and ours / OpenSandbox, and whether
// each goal is met (as Markdown with markdown set). Each figure is the mean
// over the trials; each ratio the mean of each trial's, every burst compared
// with its own trial's runs.
func report(w io.Writer, markdown bool, files []string) error {
	bySize, err := loadResults(files)
	if err != nil {
		return err
	}
	ns := make([]int, 0, len(bySize))
	for n := range bySize {
		ns = append(ns, n)
	}
	sort.Ints(ns)

	for i, n := range ns {
		if i > 0 {
			fmt.Fprintln(w)
		}
		rs := bySize[n]
		fmt.Fprintf(w, "N=%d, %d trial(s), %d container(s) per sandbox\n\n", n, len(rs), rs[0].Containers)
		if err := table(w, markdown, rs, goalSizes[n]); err != nil {
			return err
		}
	}

	failed := false
	fmt.Fprintln(w, "\nEach trial: throughput, write-only client's, OpenSandbox's; creation -> Succeed p99, OpenSandbox's; p50 creation -> Succeed / wall:")
	for _, n := range ns {
		for _, r := range bySize[n] {
			fmt.Fprintf(w, "  N=%d trial %d: %.1f/s, %s/s, %s/s; %.2fs, %ss; %.2f\n", n, r.Trial, r.OverallRate,
				num(of(limitOf, throughput)(r), 1), num(of(openSandboxOf, throughput)(r), 1),
				r.ToSucceed.P99, num(of(openSandboxOf, succeedP99)(r), 2), p50OverWall(r))
		}
	}
	fmt.Fprintln(w, "\nRequests during each burst, the harness's own subtracted (verb resource code: count):")
	for _, n := range ns {
		for _, r := range bySize[n] {
			failed = trialDetails(w, r, "ours") || failed
			if r.openSandbox != nil {
				failed = trialDetails(w, r.openSandbox, "OpenSandbox") || failed
			}
		}
	}
	if failed {
		return fmt.Errorf("some snapshots did not succeed")
	}
	return nil
}

// table prints one size's figures; checkGoals tells whether its goals count.
func table(w io.Writer, markdown bool, rs []*result, checkGoals bool) error {
	lines := [][]string{{"figure", "unit", "ours", "write-only client", "OpenSandbox", "ours / write-only", "ours / OpenSandbox", "goal", "met"}}
	for _, rw := range rows {
		cells := []string{rw.name, rw.unit,
			num(mean(rs, rw.get), rw.decimals),
			num(mean(rs, of(limitOf, rw.get)), rw.decimals),
			num(mean(rs, of(openSandboxOf, rw.get)), rw.decimals),
			ratio(mean(rs, over(limitOf, rw.get))),
			ratio(mean(rs, over(openSandboxOf, rw.get))),
		}
		goalCell, verdict := "-", "-"
		if g := rw.goal; g != nil {
			op, v, suffix := "<=", mean(rs, rw.get), ""
			if g.atLeast {
				op = ">="
			}
			if g.ofLimit {
				v, suffix = mean(rs, over(limitOf, rw.get)), " x write-only"
			}
			goalCell = fmt.Sprintf("%s %s%s", op, num(g.value, max(rw.decimals, 1)), suffix)
			if checkGoals && !math.IsNaN(v) {
				verdict = "miss"
				if (g.atLeast && v >= g.value) || (!g.atLeast && v <= g.value+1e-9) {
					verdict = "ok"
				}
			}
		}
		lines = append(lines, append(cells, goalCell, verdict))
	}
	if markdown {
		for i, cells := range lines {
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
			if i == 0 {
				fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(cells)))
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, cells := range lines {
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	return tw.Flush()
}

// trialDetails prints one trial's requests, events and failures under
// label, and reports whether any snapshot failed or did not finish.
func trialDetails(w io.Writer, r *result, label string) bool {
	at := fmt.Sprintf("N=%d trial %d, %s", r.N, r.Trial, label)
	fmt.Fprintf(w, "  %s: writes: %s\n", at, entries(r.Requests))
	fmt.Fprintf(w, "  %s: reads: %s\n", at, entries(r.ReadRequests))
	fmt.Fprintf(w, "  %s: events by reason: %v\n", at, r.EventReasons)
	if r.Mode == modeBurst && r.limit == nil {
		fmt.Fprintf(w, "  %s: no write-only client result\n", at)
	}
	for msg, count := range r.Failures {
		fmt.Fprintf(w, "  %s: Failed x%d: %s\n", at, count, msg)
	}
	if r.Failed+r.Unfinished == 0 {
		return false
	}
	fmt.Fprintf(w, "  %s: %d snapshot(s) Failed, %d unfinished\n", at, r.Failed, r.Unfinished)
	return true
}

func entries(es []countEntry) string {
	parts := make([]string, 0, len(es))
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("%s: %.0f", e.request, e.Count))
	}
	return strings.Join(parts, ", ")
}

func ratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

func num(v float64, decimals int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, v)
}
