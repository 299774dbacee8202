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

// sizes are the columns of the table.
var sizes = []int{100, 500, 1000}

// goalSizes are the sizes each goal is checked at.
var goalSizes = []int{500, 1000}

// row is one figure of the table: how to read it from a burst's result (its
// write-only client's result, of the same N, in r.limit), the baseline of
// OpenSandbox's own controller (NaN: not published) and the goal at
// goalSizes.
type row struct {
	name     string
	unit     string
	get      func(*result) float64
	base100  float64
	base500  float64
	goal     float64
	atLeast  bool // the goal is a minimum (else a maximum)
	noGoal   bool
	decimals int
}

var nan = math.NaN()

// fromLimit reads a figure of the write-only client's run.
func fromLimit(get func(*result) float64) func(*result) float64 {
	return func(r *result) float64 {
		if r.limit == nil {
			return nan
		}
		return get(r.limit)
	}
}

// limitRate is the write-only client's throughput.
var limitRate = fromLimit(func(r *result) float64 { return r.OverallRate })

// rateRatio is the burst's throughput over the write-only client's.
func rateRatio(r *result) float64 { return r.OverallRate / limitRate(r) }

// cpuRatio is the CPU time the write-only client's run took (kube-apiserver,
// etcd, the client) over the burst's (kube-apiserver, etcd, controller,
// harness): the throughput ratio on a machine that runs nothing else, as
// both runs saturate its cores.
func cpuRatio(r *result) float64 {
	if r.limit == nil {
		return nan
	}
	l := r.limit
	return (l.ApiserverCPUSecs + l.EtcdCPUSecs + l.HarnessCPUSecs) / (r.ApiserverCPUSecs + r.EtcdCPUSecs + r.CPUSecs + r.HarnessCPUSecs)
}

// p50OverWall is the median creation -> Succeed over the burst's wall time.
func p50OverWall(r *result) float64 { return r.ToSucceed.P50 / r.WallSecs }

var rows = []row{
	// The baseline's throughput is N over the time to the last Succeed
	// (N / p99 creation -> Succeed gives about the same), so ours is too.
	{name: "throughput (N / burst -> last Succeed)", unit: "snapshots/s", get: func(r *result) float64 { return r.OverallRate },
		base100: 23.1, base500: 20.4, noGoal: true, decimals: 1},
	{name: "write-only client's throughput (32 workers)", unit: "snapshots/s", get: limitRate,
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "throughput / write-only client's", unit: "x", get: rateRatio,
		base100: nan, base500: nan, goal: 0.8, atLeast: true, decimals: 2},
	{name: "throughput, middle 80% of completions", unit: "snapshots/s", get: func(r *result) float64 { return r.SteadyRate },
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "creation -> TaskRun, p50", unit: "s", get: func(r *result) float64 { return r.ToTaskRun.P50 },
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "creation -> TaskRun, p99", unit: "s", get: func(r *result) float64 { return r.ToTaskRun.P99 },
		base100: 3.49, base500: 18.96, noGoal: true, decimals: 2},
	{name: "creation -> Succeed, p50", unit: "s", get: func(r *result) float64 { return r.ToSucceed.P50 },
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "creation -> Succeed, p99", unit: "s", get: func(r *result) float64 { return r.ToSucceed.P99 },
		base100: 4.19, base500: 23.66, noGoal: true, decimals: 2},
	{name: "burst -> last Succeed (wall)", unit: "s", get: func(r *result) float64 { return r.WallSecs },
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "creation -> Succeed p50 / wall", unit: "x", get: p50OverWall,
		base100: nan, base500: nan, goal: 0.6, decimals: 2},
	{name: "write-only client: creation -> last write, p50", unit: "s", get: fromLimit(func(r *result) float64 { return r.ToSucceed.P50 }),
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "object writes / snapshot", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.ObjectWrites) },
		base100: nan, base500: 6, goal: 4, decimals: 2},
	{name: "events / snapshot (written)", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.Events) },
		base100: nan, base500: 2, noGoal: true, decimals: 2},
	{name: "events / snapshot (delivered)", unit: "", get: func(r *result) float64 { return perSnapshot(r, float64(delivered(r))) },
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "API writes / snapshot (objects + events)", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.ObjectWrites+r.Events) },
		base100: 8.35, base500: 8.23, goal: 5, decimals: 2},
	{name: "API reads / snapshot (GET, LIST)", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.Reads) },
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "409 conflicts / snapshot", unit: "%", get: func(r *result) float64 { return 100 * perSnapshot(r, r.Conflicts) },
		base100: nan, base500: 22, goal: 0, decimals: 1},
	{name: "controller peak RSS (VmHWM)", unit: "MiB", get: func(r *result) float64 { return float64(r.PeakRSSKiB) / 1024 },
		base100: 73, base500: 96.5, goal: 96.5, decimals: 1},
	{name: "controller CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.CPUSecs },
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "kube-apiserver CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.ApiserverCPUSecs },
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "etcd CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.EtcdCPUSecs },
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "harness CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.HarnessCPUSecs },
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "machine cores busy, burst -> last Succeed", unit: "cores", get: func(r *result) float64 { return r.MachineBusyCores },
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "write-only client: kube-apiserver CPU", unit: "s", get: fromLimit(func(r *result) float64 { return r.ApiserverCPUSecs }),
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "write-only client: etcd CPU", unit: "s", get: fromLimit(func(r *result) float64 { return r.EtcdCPUSecs }),
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "write-only client: its own CPU", unit: "s", get: fromLimit(func(r *result) float64 { return r.HarnessCPUSecs }),
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "CPU per snapshot: write-only client's / ours", unit: "x", get: cpuRatio,
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "write-only client: machine cores busy", unit: "cores", get: fromLimit(func(r *result) float64 { return r.MachineBusyCores }),
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "snapshots Succeed / N", unit: "%", get: func(r *result) float64 { return 100 * perSnapshot(r, float64(r.Succeeded)) },
		base100: nan, base500: nan, goal: 100, atLeast: true, decimals: 0},
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
// client's result of the same N and trial. It returns the bursts by N, in
// the order of their trials.
func loadResults(files []string) (map[int][]*result, error) {
	bursts, limits := map[int][]*result{}, map[trialKey]*result{}
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
		default:
			return nil, fmt.Errorf("%s: unknown mode %q", f, r.Mode)
		}
	}
	for n, rs := range bursts {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Trial < rs[j].Trial })
		for _, r := range rs {
			r.limit = limits[trialKey{n, r.Trial}]
		}
	}
	return bursts, nil
}

// mean is the mean of rw's figure over the trials rs, NaN without any.
func mean(rs []*result, rw row) float64 {
	if len(rs) == 0 {
		return nan
	}
	sum := 0.0
	for _, r := range rs {
		sum += rw.get(r)
	}
	return sum / float64(len(rs))
}

// report prints the results of files as a table beside the baseline (as
// Markdown with markdown set), with the ratios ours / baseline and whether
// each goal is met at goalSizes. Each figure is the mean over the trials;
// each trial's burst is compared with its own write-only client's run.
func report(w io.Writer, markdown bool, files []string) error {
	bySize, err := loadResults(files)
	if err != nil {
		return err
	}

	var lines [][]string
	lines = append(lines, []string{"figure", "unit", "N=100", "N=500", "N=1000", "OpenSandbox N=100", "OpenSandbox N=500",
		"ours/base 100", "ours/base 500", "goal", "met at N=500, 1000"})
	for _, rw := range rows {
		cells := []string{rw.name, rw.unit}
		for _, n := range sizes {
			cells = append(cells, value(bySize[n], rw))
		}
		cells = append(cells, num(rw.base100, rw.decimals), num(rw.base500, rw.decimals))
		cells = append(cells, ratio(bySize[100], rw, rw.base100), ratio(bySize[500], rw, rw.base500))
		goal, verdicts := "-", []string{}
		if !rw.noGoal {
			op := "<="
			if rw.atLeast {
				op = ">="
			}
			goal = fmt.Sprintf("%s %s", op, num(rw.goal, rw.decimals))
			for _, n := range goalSizes {
				v := mean(bySize[n], rw)
				if math.IsNaN(v) {
					verdicts = append(verdicts, "-")
					continue
				}
				verdict := "miss"
				if (rw.atLeast && v >= rw.goal) || (!rw.atLeast && v <= rw.goal+1e-9) {
					verdict = "ok"
				}
				verdicts = append(verdicts, verdict)
			}
		}
		cells = append(cells, goal, strings.Join(verdicts, ", "))
		lines = append(lines, cells)
	}
	if markdown {
		for i, cells := range lines {
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
			if i == 0 {
				fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(cells)))
			}
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, cells := range lines {
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	failed := false
	fmt.Fprintln(w, "\nEach trial: throughput, write-only client's, their ratio; CPU per snapshot, write-only client's / ours; p50 creation -> Succeed / wall:")
	for _, n := range sizes {
		for _, r := range bySize[n] {
			fmt.Fprintf(w, "  N=%d trial %d: %.1f/s, %s/s, %sx; %sx; %.2f\n", n, r.Trial, r.OverallRate,
				num(limitRate(r), 1), num(rateRatio(r), 2), num(cpuRatio(r), 2), p50OverWall(r))
		}
	}
	fmt.Fprintln(w, "\nRequests during each burst, the harness's own subtracted (verb resource code: count):")
	for _, n := range sizes {
		for _, r := range bySize[n] {
			failed = trialDetails(w, r) || failed
		}
	}
	if failed {
		return fmt.Errorf("some snapshots did not succeed")
	}
	return nil
}

// trialDetails prints one trial's requests, events and failures, and
// reports whether any snapshot failed or did not finish.
func trialDetails(w io.Writer, r *result) bool {
	at := fmt.Sprintf("N=%d trial %d", r.N, r.Trial)
	fmt.Fprintf(w, "  %s: writes: %s\n", at, entries(r.Requests))
	fmt.Fprintf(w, "  %s: reads: %s\n", at, entries(r.ReadRequests))
	fmt.Fprintf(w, "  %s: events by reason: %v\n", at, r.EventReasons)
	if r.limit == nil {
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

func value(rs []*result, rw row) string {
	return num(mean(rs, rw), rw.decimals)
}

func ratio(rs []*result, rw row, base float64) string {
	v := mean(rs, rw)
	if math.IsNaN(v) || math.IsNaN(base) || base == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v/base)
}

func num(v float64, decimals int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, v)
}
