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
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/localcluster"
)

// sweepDefaults are the sweep's settings as the environment of
// test/bench/controlplane/run.sh gives them; flags override them.
type sweepDefaults struct {
	sizes       sizeList
	trials      int
	containers  int
	timeout     time.Duration
	openSandbox bool
}

// defaultsFromEnv reads BENCH_SIZES, BENCH_TRIALS, BENCH_CONTAINERS,
// BENCH_TIMEOUT and BENCH_OPENSANDBOX through getenv; an unset or empty
// variable keeps its default.
func defaultsFromEnv(getenv func(string) string) (sweepDefaults, error) {
	d := sweepDefaults{sizes: sizeList{100, 500, 1000}, trials: 1, containers: 1, timeout: 5 * time.Minute, openSandbox: true}
	if v := getenv("BENCH_SIZES"); v != "" {
		if err := d.sizes.Set(v); err != nil {
			return d, fmt.Errorf("BENCH_SIZES: %w", err)
		}
	}
	for _, f := range []struct {
		name string
		into *int
	}{{"BENCH_TRIALS", &d.trials}, {"BENCH_CONTAINERS", &d.containers}} {
		if v := getenv(f.name); v != "" {
			n, err := positive(v)
			if err != nil {
				return d, fmt.Errorf("%s: %w", f.name, err)
			}
			*f.into = n
		}
	}
	if v := getenv("BENCH_TIMEOUT"); v != "" {
		t, err := time.ParseDuration(v)
		if err != nil || t <= 0 {
			return d, fmt.Errorf("BENCH_TIMEOUT=%q: want a positive duration such as 5m", v)
		}
		d.timeout = t
	}
	switch v := getenv("BENCH_OPENSANDBOX"); v {
	case "", "1":
	case "0":
		d.openSandbox = false
	default:
		return d, fmt.Errorf("BENCH_OPENSANDBOX=%q: want 1 (measure OpenSandbox's controller) or 0 (skip it)", v)
	}
	return d, nil
}

// sizeList is the sizes a sweep runs, given as a space-separated list.
type sizeList []int

func (s *sizeList) String() string {
	parts := make([]string, len(*s))
	for i, n := range *s {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, " ")
}

// Set parses a space-separated list of positive sizes.
func (s *sizeList) Set(v string) error {
	var sizes sizeList
	for _, f := range strings.Fields(v) {
		n, err := positive(f)
		if err != nil {
			return fmt.Errorf("size %w", err)
		}
		sizes = append(sizes, n)
	}
	if len(sizes) == 0 {
		return fmt.Errorf("no size in %q", v)
	}
	*s = sizes
	return nil
}

func positive(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q: want a positive number", v)
	}
	return n, nil
}

// trial is one size's turn in one trial: its three runs.
type trial struct{ n, trial int }

// plan lists a sweep's trials in the order they run: every size of trial
// 1, then every size of trial 2, so that a trial's sizes see the same
// machine state.
func plan(sizes []int, trials int) []trial {
	var ts []trial
	for t := 1; t <= trials; t++ {
		for _, n := range sizes {
			ts = append(ts, trial{n: n, trial: t})
		}
	}
	return ts
}

// resultFile is where the run of mode writes its result for size n and
// trial t: result-N-tT.json (this controller's burst), limit-N-tT.json or
// opensandbox-N-tT.json.
func resultFile(dir, mode string, n, t int) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%d-t%d.json", resultKind(mode), n, t))
}

// resultKind starts the names of mode's result files.
func resultKind(mode string) string {
	if mode == modeBurst {
		return "result"
	}
	return mode
}

// resultFiles are the result files of the trials ts, in the order bench
// report takes them.
func resultFiles(dir string, ts []trial, openSandbox bool) []string {
	var files []string
	for _, t := range ts {
		files = append(files, resultFile(dir, modeBurst, t.n, t.trial), resultFile(dir, modeLimit, t.n, t.trial))
		if openSandbox {
			files = append(files, resultFile(dir, modeOpenSandbox, t.n, t.trial))
		}
	}
	return files
}

// sweep runs the whole benchmark on the cluster of test/cluster/cluster-up.sh,
// with kwok running o.node: for each trial and each size, on N sandboxes
// made afresh each time (bench setup), three measured runs:
//
//  1. with no controller running, the API server's limit (bench limit);
//  2. this controller, started fresh by test/cluster/run-controller.sh (its
//     own ServiceAccount, config/500-controller.yaml's QPS and burst): bench
//     run, then bench cleanup while it finalizes the snapshots;
//  3. unless o.openSandbox is off, the same with OpenSandbox's controller in
//     its place (openSandboxController): bench opensandbox, bench cleanup.
//
// Then it writes report.txt (also to w) and report.md beside the result
// files in _output/bench/.
func sweep(ctx context.Context, w io.Writer, c *clients, o *options) error {
	l := localcluster.DirsAt(o.root)
	var osc *openSandboxController
	if o.openSandbox {
		var err error
		if osc, err = installOpenSandbox(ctx, c, l, o.kubeconfig); err != nil {
			return fmt.Errorf("installing OpenSandbox's controller: %w", err)
		}
	}
	dir := benchDir(l)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := removeResults(dir); err != nil {
		return err
	}
	ts := plan(o.sizes, o.trials)
	for _, t := range ts {
		if err := runTrial(ctx, c, o, l, osc, t); err != nil {
			return fmt.Errorf("N=%d, trial %d: %w", t.n, t.trial, err)
		}
	}
	return writeReports(w, dir, resultFiles(dir, ts, o.openSandbox))
}

// benchDir is where a sweep writes its results and reports.
func benchDir(l localcluster.Dirs) string { return filepath.Join(l.Root, "_output", "bench") }

// removeResults removes the result files of an earlier sweep, so that the
// report reads only this one's.
func removeResults(dir string) error {
	for _, mode := range []string{modeBurst, modeLimit, modeOpenSandbox} {
		old, err := filepath.Glob(filepath.Join(dir, resultKind(mode)+"-*.json"))
		if err != nil {
			return err
		}
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// runTrial makes size t.n's three runs of trial t.trial.
func runTrial(ctx context.Context, c *clients, o *options, l localcluster.Dirs, osc *openSandboxController, t trial) error {
	dir := benchDir(l)
	step := *o
	step.n, step.trial = t.n, t.trial
	var err error
	if step.apiPid, err = runningPID(l, "kube-apiserver"); err != nil {
		return err
	}
	if step.etcdPid, err = runningPID(l, "etcd"); err != nil {
		return err
	}
	say := func(format string, args ...any) {
		logf("N=%d, trial %d: %s", t.n, t.trial, fmt.Sprintf(format, args...))
	}

	say("setup")
	if err := setup(ctx, c, &step); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	say("write-only client, no controller running")
	step.out = resultFile(dir, modeLimit, t.n, t.trial)
	if err := limit(ctx, c, &step); err != nil {
		return fmt.Errorf("write-only client: %w", err)
	}
	if err := withController(ctx, l, func(pid int) error {
		say("burst (controller pid %d)", pid)
		step.pid, step.out = pid, resultFile(dir, modeBurst, t.n, t.trial)
		if err := run(ctx, c, &step); err != nil {
			return fmt.Errorf("burst: %w", err)
		}
		say("cleanup")
		return cleanup(ctx, c, &step)
	}); err != nil {
		return err
	}
	if osc == nil {
		return nil
	}

	say("setup for OpenSandbox's controller")
	if err := setup(ctx, c, &step); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	return osc.with(ctx, func(pid int) error {
		say("burst with OpenSandbox's controller (pid %d)", pid)
		step.pid, step.out = pid, resultFile(dir, modeOpenSandbox, t.n, t.trial)
		if err := openSandbox(ctx, c, &step); err != nil {
			return fmt.Errorf("burst with OpenSandbox's controller: %w", err)
		}
		say("cleanup")
		return cleanup(ctx, c, &step)
	})
}

// writeReports writes report.md, then report.txt and w, from files. A
// report that finds failed snapshots is still written whole, and fails.
func writeReports(w io.Writer, dir string, files []string) error {
	md, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	mdErr := report(md, true, files)
	if err := md.Close(); err != nil {
		return err
	}
	txt, err := os.Create(filepath.Join(dir, "report.txt"))
	if err != nil {
		return err
	}
	txtErr := report(io.MultiWriter(txt, w), false, files)
	if err := txt.Close(); err != nil {
		return err
	}
	if txtErr != nil {
		return txtErr
	}
	return mdErr
}
