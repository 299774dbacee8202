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

// Command chart-diff compares the Helm chart, rendered, with config/:
//
//	helm template ... | chart-diff - ROOT
//
// It reads the rendered objects from a file (- for stdin) and config/'s
// from ROOT/config, and fails, printing each difference, unless they are the
// same objects but for what the chart templates by design (package
// test/chart). hack/verify-chart.sh runs it.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/chart"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/manifests"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: chart-diff RENDERED|- ROOT")
		os.Exit(2)
	}
	diffs, n, err := run(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "chart-diff:", err)
		os.Exit(1)
	}
	for _, d := range diffs {
		fmt.Fprintln(os.Stderr, d)
	}
	if len(diffs) > 0 {
		fmt.Fprintf(os.Stderr, "chart-diff: the chart and config/ differ in %d of their objects\n", len(diffs))
		os.Exit(1)
	}
	fmt.Printf("chart-diff: the chart renders config/'s %d objects\n", n)
}

// run returns the differences between the rendered chart and root/config,
// and how many objects config/ holds.
func run(rendered, root string) ([]string, int, error) {
	var b []byte
	var err error
	if rendered == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(rendered)
	}
	if err != nil {
		return nil, 0, err
	}
	chartDocs, err := manifests.Split(b)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", rendered, err)
	}
	got, err := chart.Objects(chartDocs)
	if err != nil {
		return nil, 0, fmt.Errorf("the chart: %w", err)
	}
	configDocs, err := manifests.ConfigDocuments(root)
	if err != nil {
		return nil, 0, err
	}
	want, err := chart.Objects(configDocs)
	if err != nil {
		return nil, 0, fmt.Errorf("config/: %w", err)
	}
	return chart.Compare(got, want), len(want), nil
}
