//go:build e2e_node

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

package e2enode

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// memoryNodesLabel is the node label hack/memory-nodes.sh --label sets.
const memoryNodesLabel = "sandbox.opensandbox.io/memory-snapshots"

// TestOpenSandboxMemoryNodes runs hack/memory-nodes.sh --label as a platform
// engineer would, through OpenSandbox's controller: the node takes a memory
// snapshot and is labelled true; with memory-anonymous-pull Refuse against
// the node's anonymous registry it cannot, says why and is labelled false;
// each probe leaves no sandbox, snapshot or TaskRun behind.
func TestOpenSandboxMemoryNodes(t *testing.T) {
	requireOpenSandbox(t)
	ns := nodeframework.NewNamespace(t)
	nodes, err := nodeframework.Clients().Kube.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("listing the node: %d nodes, %v", len(nodes.Items), err)
	}
	node := nodes.Items[0].Name
	t.Cleanup(func() { nodeframework.Run(t, "", "kubectl", "label", "node", node, memoryNodesLabel+"-") })

	// A base image containerd's restore can pull (memoryBase).
	image := memoryBase(t)
	probe := func(want, reason string) {
		t.Helper()
		out, err := nodeframework.TryRun("", "../../hack/memory-nodes.sh", "--label", "--namespace", ns,
			"--image", image, "--timeout", "180")
		fields := strings.Fields(out)
		if err != nil || len(fields) < 3 || fields[0] != node || fields[1] != want || fields[2] != reason+":" {
			t.Fatalf("memory-nodes.sh printed %q (%v), want %q", out, err, node+" "+want+" "+reason+": …")
		}
		label := map[string]string{"yes": "true", "no": "false"}[want]
		if got := nodeLabel(t, node); got != label {
			t.Fatalf("node %s has %s=%q after the probe, want %q", node, memoryNodesLabel, got, label)
		}
		left := nodeframework.Run(t, "", "kubectl", "-n", ns, "get", "batchsandboxes,sandboxsnapshots", "-o", "name")
		if strings.TrimSpace(left) != "" {
			t.Fatalf("the probe left in %s:\n%s", ns, left)
		}
		nodeframework.Eventually(t, "the probe's TaskRuns to go", time.Minute, func() (bool, error) {
			trs, err := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(metav1.NamespaceAll).List(t.Context(),
				metav1.ListOptions{LabelSelector: sandbox.SnapshotNamespaceLabel + "=" + ns})
			return err == nil && len(trs.Items) == 0, err
		})
	}

	probe("yes", "Succeeded")
	nodeframework.SetConfig(t, map[string]any{config.MemoryAnonymousPullKey: "Refuse"}, `"memoryAnonymousPull":"Refuse"`)
	probe("no", "MemorySnapshotUnsupported")
}

// nodeLabel returns the value of node's memory-snapshots label.
func nodeLabel(t *testing.T, node string) string {
	t.Helper()
	n, err := nodeframework.Clients().Kube.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels[memoryNodesLabel]
}
