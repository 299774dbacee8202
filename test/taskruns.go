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

package test

import (
	"context"
	"testing"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
)

// TaskRunSelector is the label selector of the TaskRuns made for snapshot
// of ns, and of their pods, which carry their labels; of those made for
// every snapshot of ns when snapshot is empty.
func TaskRunSelector(ns, snapshot string) string {
	set := labels.Set{sandbox.SnapshotNamespaceLabel: ns}
	if snapshot != "" {
		set[sandbox.SnapshotNameLabel] = snapshot
	}
	return labels.SelectorFromSet(set).String()
}

// TaskRunsOf lists the TaskRuns made for snapshot of ns, or for every
// snapshot of ns when snapshot is empty.
func TaskRunsOf(ctx context.Context, t *testing.T, c *Clients, ns, snapshot string) []pipelinev1.TaskRun {
	t.Helper()
	sel := TaskRunSelector(ns, snapshot)
	list, err := c.Pipeline.TektonV1().TaskRuns(SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatalf("listing TaskRuns %s: %v", sel, err)
	}
	return list.Items
}

// TaskRunNames are the names of trs.
func TaskRunNames(trs []pipelinev1.TaskRun) []string {
	var out []string
	for _, tr := range trs {
		out = append(out, tr.Name)
	}
	return out
}
