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
	"strings"
	"text/tabwriter"
)

// sizes are the columns of the table.
var sizes = []int{100, 500, 1000}

// row is one figure of the table: how to read it from a result, the
// baseline of OpenSandbox's own controller (NaN: not published) and the goal
// at N=500.
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

var rows = []row{
	// The baseline's throughput is N over the time to the last Succeed
	// (N / p99 creation -> Succeed gives about the same), so ours is too.
	{name: "throughput (N / burst -> last Succeed)", unit: "snapshots/s", get: func(r *result) float64 { return r.OverallRate },
		base100: 23.1, base500: 20.4, goal: 3 * 20.4, atLeast: true, decimals: 1},
	{name: "throughput, middle 80% of completions", unit: "snapshots/s", get: func(r *result) float64 { return r.SteadyRate },
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "creation -> TaskRun, p50", unit: "s", get: func(r *result) float64 { return r.ToTaskRun.P50 },
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "creation -> TaskRun, p99", unit: "s", get: func(r *result) float64 { return r.ToTaskRun.P99 },
		base100: 3.49, base500: 18.96, goal: 1, decimals: 2},
	{name: "creation -> Succeed, p50", unit: "s", get: func(r *result) float64 { return r.ToSucceed.P50 },
		base100: nan, base500: nan, noGoal: true, decimals: 2},
	{name: "creation -> Succeed, p99", unit: "s", get: func(r *result) float64 { return r.ToSucceed.P99 },
		base100: 4.19, base500: 23.66, goal: 3, decimals: 2},
	{name: "object writes / snapshot", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.ObjectWrites) },
		base100: nan, base500: 6, goal: 4, decimals: 2},
	{name: "events / snapshot", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.Events) },
		base100: nan, base500: 2, goal: 2, decimals: 2},
	{name: "API writes / snapshot (objects + events)", unit: "", get: func(r *result) float64 { return perSnapshot(r, r.ObjectWrites+r.Events) },
		base100: 8.35, base500: 8.23, goal: 6, decimals: 2},
	{name: "409 conflicts / snapshot", unit: "%", get: func(r *result) float64 { return 100 * perSnapshot(r, r.Conflicts) },
		base100: nan, base500: 22, goal: 0, decimals: 1},
	{name: "controller peak RSS (VmHWM)", unit: "MiB", get: func(r *result) float64 { return float64(r.PeakRSSKiB) / 1024 },
		base100: 73, base500: 96.5, goal: 96.5, decimals: 1},
	{name: "controller CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.CPUSecs },
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "kube-apiserver CPU, burst -> last Succeed", unit: "s", get: func(r *result) float64 { return r.ApiserverCPUSecs },
		base100: nan, base500: nan, noGoal: true, decimals: 1},
	{name: "machine cores busy, burst -> last Succeed", unit: "cores", get: func(r *result) float64 { return r.MachineBusyCores },
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

// report prints the results of files as a table beside the baseline, with
// the ratios ours / baseline and whether N=500 meets its goal.
func report(w io.Writer, files []string) error {
	bySize := map[int]*result{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		r := &result{}
		if err := json.Unmarshal(b, r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		bySize[r.N] = r
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tunit\tN=100\tN=500\tN=1000\t| OpenSandbox N=100\tN=500\t| ours/base 100\t500\t| goal N=500\t\t")
	for _, rw := range rows {
		cells := []string{rw.name, rw.unit}
		for _, n := range sizes {
			cells = append(cells, value(bySize[n], rw))
		}
		cells = append(cells, "| "+num(rw.base100, rw.decimals), num(rw.base500, rw.decimals))
		cells = append(cells, "| "+ratio(bySize[100], rw, rw.base100), ratio(bySize[500], rw, rw.base500))
		goal, verdict := "| -", ""
		if !rw.noGoal {
			op := "<="
			if rw.atLeast {
				op = ">="
			}
			goal = fmt.Sprintf("| %s %s", op, num(rw.goal, rw.decimals))
			if r := bySize[500]; r != nil {
				v := rw.get(r)
				verdict = "miss"
				if (rw.atLeast && v >= rw.goal) || (!rw.atLeast && v <= rw.goal+1e-9) {
					verdict = "ok"
				}
			}
		}
		cells = append(cells, goal, verdict)
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	failed := false
	fmt.Fprintln(w, "\nWrites during each burst, the harness's own subtracted (verb resource code: count):")
	for _, n := range sizes {
		r := bySize[n]
		if r == nil {
			continue
		}
		var parts []string
		for _, e := range r.Requests {
			parts = append(parts, fmt.Sprintf("%s: %.0f", e.request, e.Count))
		}
		fmt.Fprintf(w, "  N=%d: %s\n", n, strings.Join(parts, ", "))
		fmt.Fprintf(w, "  N=%d: events by reason: %v\n", n, r.EventReasons)
		if r.Failed+r.Unfinished > 0 {
			fmt.Fprintf(w, "  N=%d: %d snapshot(s) Failed, %d unfinished\n", n, r.Failed, r.Unfinished)
			failed = true
		}
		for msg, count := range r.Failures {
			fmt.Fprintf(w, "  N=%d: Failed x%d: %s\n", n, count, msg)
		}
	}
	if failed {
		return fmt.Errorf("some snapshots did not succeed")
	}
	return nil
}

func value(r *result, rw row) string {
	if r == nil {
		return "-"
	}
	return num(rw.get(r), rw.decimals)
}

func ratio(r *result, rw row, base float64) string {
	if r == nil || math.IsNaN(base) || base == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", rw.get(r)/base)
}

func num(v float64, decimals int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, v)
}
