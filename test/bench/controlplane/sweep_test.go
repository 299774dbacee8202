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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultsFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    sweepDefaults
		wantErr string
	}{{
		name: "unset",
		want: sweepDefaults{sizes: sizeList{100, 500, 1000}, trials: 1, containers: 1, timeout: 5 * time.Minute, openSandbox: true},
	}, {
		name: "all set",
		env: map[string]string{"BENCH_SIZES": " 20\t500 ", "BENCH_TRIALS": "3", "BENCH_CONTAINERS": "2",
			"BENCH_TIMEOUT": "90s", "BENCH_OPENSANDBOX": "0"},
		want: sweepDefaults{sizes: sizeList{20, 500}, trials: 3, containers: 2, timeout: 90 * time.Second},
	}, {
		name: "empty keeps the default",
		env:  map[string]string{"BENCH_SIZES": "", "BENCH_OPENSANDBOX": ""},
		want: sweepDefaults{sizes: sizeList{100, 500, 1000}, trials: 1, containers: 1, timeout: 5 * time.Minute, openSandbox: true},
	}, {
		name:    "size not a number",
		env:     map[string]string{"BENCH_SIZES": "100 lots"},
		wantErr: `BENCH_SIZES: size "lots"`,
	}, {
		name:    "blank sizes",
		env:     map[string]string{"BENCH_SIZES": "  "},
		wantErr: "BENCH_SIZES: no size",
	}, {
		name:    "zero trials",
		env:     map[string]string{"BENCH_TRIALS": "0"},
		wantErr: `BENCH_TRIALS: "0"`,
	}, {
		name:    "negative containers",
		env:     map[string]string{"BENCH_CONTAINERS": "-1"},
		wantErr: `BENCH_CONTAINERS: "-1"`,
	}, {
		name:    "timeout without a unit",
		env:     map[string]string{"BENCH_TIMEOUT": "300"},
		wantErr: `BENCH_TIMEOUT="300"`,
	}, {
		name:    "OpenSandbox neither 0 nor 1",
		env:     map[string]string{"BENCH_OPENSANDBOX": "yes"},
		wantErr: `BENCH_OPENSANDBOX="yes"`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := defaultsFromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(sweepDefaults{})); diff != "" {
				t.Errorf("defaults (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSizeListString(t *testing.T) {
	s := sizeList{}
	if err := s.Set("100 500\n1000"); err != nil {
		t.Fatal(err)
	}
	if got := s.String(); got != "100 500 1000" {
		t.Errorf("String() = %q, want the list Set took", got)
	}
}

func TestPlanRunsEverySizeOfATrialFirst(t *testing.T) {
	got := plan([]int{500, 100}, 2)
	want := []trial{{500, 1}, {100, 1}, {500, 2}, {100, 2}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(trial{})); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}

func TestResultFiles(t *testing.T) {
	ts := []trial{{20, 1}, {20, 2}}
	if diff := cmp.Diff([]string{
		"d/result-20-t1.json", "d/limit-20-t1.json", "d/opensandbox-20-t1.json",
		"d/result-20-t2.json", "d/limit-20-t2.json", "d/opensandbox-20-t2.json",
	}, resultFiles("d", ts, true)); diff != "" {
		t.Errorf("with OpenSandbox's runs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"d/result-20-t1.json", "d/limit-20-t1.json", "d/result-20-t2.json", "d/limit-20-t2.json"},
		resultFiles("d", ts, false)); diff != "" {
		t.Errorf("without (-want +got):\n%s", diff)
	}
}

func TestRemoveResultsKeepsTheRest(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"result-20-t1.json", "limit-100-t2.json", "opensandbox-20-t1.json", "report.txt", "kwok.log"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeResults(dir); err != nil {
		t.Fatal(err)
	}
	left, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Join(dir, "kwok.log"), filepath.Join(dir, "report.txt")}, left); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
}

func TestWriteReports(t *testing.T) {
	dir := t.TempDir()
	files := writeResults(t,
		result{Trial: 1, N: 20, Succeeded: 20, OverallRate: 10},
		result{Mode: modeLimit, Trial: 1, N: 20, Succeeded: 20, OverallRate: 20},
	)
	var out strings.Builder
	if err := writeReports(&out, dir, files); err != nil {
		t.Fatal(err)
	}
	txt, err := os.ReadFile(filepath.Join(dir, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(txt) || !strings.Contains(out.String(), "N=20, 1 trial(s)") {
		t.Errorf("report.txt and the output differ, or miss N=20:\n%s\n---\n%s", txt, out.String())
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| figure | unit | ours |") {
		t.Errorf("report.md is no Markdown table:\n%s", md)
	}
}

func TestWriteReportsFailsOnUnfinishedSnapshotsAfterWriting(t *testing.T) {
	dir := t.TempDir()
	files := writeResults(t, result{Trial: 1, N: 20, Succeeded: 19, Unfinished: 1})
	err := writeReports(&strings.Builder{}, dir, files)
	if err == nil {
		t.Fatal("no error for an unfinished snapshot")
	}
	for _, f := range []string{"report.txt", "report.md"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || !strings.Contains(string(b), "1 unfinished") {
			t.Errorf("%s (%v) does not tell the unfinished snapshot:\n%s", f, err, b)
		}
	}
}
