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

package config

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// NodePoolsKey lists the node pools whose containerd keeps its socket or
// snapshots elsewhere than containerd-socket and containerd-overlayfs-root
// say: clusters mix node images.
const NodePoolsKey = "node-pools"

// NodePool is one entry of node-pools: the nodes whose labels hold every
// label of NodeSelector, and where their containerd's socket and overlayfs
// snapshots are.
type NodePool struct {
	// NodeSelector selects the pool's nodes by label.
	NodeSelector map[string]string `json:"nodeSelector"`
	// ContainerdSocket replaces containerd-socket on them, when set.
	ContainerdSocket *string `json:"containerd-socket,omitempty"`
	// OverlayfsRoot replaces containerd-overlayfs-root on them, when set;
	// empty turns the copy of upper directories off there.
	OverlayfsRoot *string `json:"containerd-overlayfs-root,omitempty"`
}

// parseNodePools parses node-pools, a YAML list of NodePool.
func parseNodePools(v string) ([]NodePool, error) {
	var pools []NodePool
	if err := yaml.UnmarshalStrict([]byte(v), &pools); err != nil {
		return nil, fmt.Errorf("not a YAML list of {nodeSelector, containerd-socket, containerd-overlayfs-root}: %w", err)
	}
	for i, p := range pools {
		if len(p.NodeSelector) == 0 {
			return nil, fmt.Errorf("entry %d: nodeSelector is empty, which would select every node", i)
		}
		for k, v := range p.NodeSelector {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				return nil, fmt.Errorf("entry %d: nodeSelector %s=%s: %s", i, k, v, strings.Join(errs, "; "))
			}
		}
		if p.ContainerdSocket == nil && p.OverlayfsRoot == nil {
			return nil, fmt.Errorf("entry %d: sets neither containerd-socket nor containerd-overlayfs-root", i)
		}
		if p.ContainerdSocket != nil && !strings.HasPrefix(*p.ContainerdSocket, "/") {
			return nil, fmt.Errorf("entry %d: containerd-socket %q is not an absolute path", i, *p.ContainerdSocket)
		}
		if p.OverlayfsRoot != nil && *p.OverlayfsRoot != "" && !strings.HasPrefix(*p.OverlayfsRoot, "/") {
			return nil, fmt.Errorf("entry %d: containerd-overlayfs-root %q is not an absolute path", i, *p.OverlayfsRoot)
		}
	}
	return pools, nil
}

// OnNode returns the settings for a node labelled nodeLabels: those of the
// first node pool whose nodeSelector it matches, else s itself.
func (s *Snapshot) OnNode(nodeLabels map[string]string) *Snapshot {
	for _, p := range s.NodePools {
		if !labels.SelectorFromSet(p.NodeSelector).Matches(labels.Set(nodeLabels)) {
			continue
		}
		on := *s
		if p.ContainerdSocket != nil {
			on.ContainerdSocket = *p.ContainerdSocket
		}
		if p.OverlayfsRoot != nil {
			on.OverlayfsRoot = *p.OverlayfsRoot
		}
		return &on
	}
	return s
}
