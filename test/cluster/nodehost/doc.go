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

// Package nodehost keeps the books of what test/cluster/node-up.sh changes
// on the host outside its private folders, so that test/cluster/node-down.sh
// undoes exactly that and nothing else. test/cmd/node-host is its command.
//
// node-up first refuses (Refuse), having changed nothing, when something
// else holds what the node needs. Then, before it changes anything, it
// records the host in _output/node-host/ (RecordStart):
//
//	manifest   what node-up itself changed, one change a line, in order:
//	             path P                 P did not exist; node-up created it
//	             link NAME              node-up created the network link NAME
//	             chain IPT TABLE NAME   node-up created the chain
//	             sysctl KEY VALUE       KEY's value before node-up (restored if changed)
//	before/    the host as it was, for what the daemons (kubelet, kube-proxy,
//	           containerd, CNI) create on their own:
//	             mounts                 mount points
//	             chains                 "IPT TABLE CHAIN" of every iptables chain
//	             cgroups                top-level cgroups of each hierarchy
//	             paths                  the fixed paths the daemons write, that existed
//	             entries                the entries of the shared folders they write into
//
// node-down (Undo) then removes only what is new since and belongs to this
// node, in this order:
//   - the shims of this containerd that outlived it, and the processes left
//     in new kubepods cgroups;
//   - mounts under the node's own folders (_output/node, /run/sso-node; the
//     kubelet's pods live there too); a new mount elsewhere is reported, not
//     touched;
//   - the kubelet's device-plugin socket, the /var/log/containers links into
//     this kubelet's pod logs, new /var/lib/cni/results files of this node's
//     network or sandboxes, the shim sockets in /run/containerd/s of this
//     containerd's tasks, then the fixed folders that did not exist before;
//   - iptables chains that did not exist before (KUBE-* of kubelet and
//     kube-proxy, SSO-FORWARD-GUARD), and the rules of older chains that jump
//     to them;
//   - new kubepods and k8s.io cgroups;
//   - then the manifest, backwards: the bridge, /run/sso-node, the sysctls.
//
// The host test of make e2e-node (Check* and LayDecoys) proves both from the
// outside, comparing a State of the host taken before node-up with one
// taken after node-down.
package nodehost
