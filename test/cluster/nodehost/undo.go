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

package nodehost

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Op is what one action of the undo plan does.
type Op string

// The actions of the undo plan.
const (
	// opKill kills a shim of this containerd that outlived it: PID.
	opKill Op = "kill"
	// opKillCgroups kills every process left in the cgroup trees: DIR...
	opKillCgroups Op = "kill-cgroups"
	// opUnmount unmounts a mount point: DIR.
	opUnmount Op = "unmount"
	// opKeep reports something left alone: MESSAGE.
	opKeep Op = "keep"
	// opRemove removes a file, link or socket: PATH.
	opRemove Op = "remove"
	// opRmdir removes a folder if it is empty: DIR.
	opRmdir Op = "rmdir"
	// opRemoveTree unmounts what is under a folder, then removes it without
	// crossing into another file system: DIR.
	opRemoveTree Op = "remove-tree"
	// opDeleteRule deletes an iptables rule: IPT TABLE SPEC.
	opDeleteRule Op = "delete-rule"
	// opDeleteChains flushes, then deletes iptables chains: IPT TABLE CHAIN...
	opDeleteChains Op = "delete-chains"
	// opRemoveCgroup removes a cgroup tree: DIR.
	opRemoveCgroup Op = "remove-cgroup"
	// opDeleteLink deletes a network link if it exists: NAME.
	opDeleteLink Op = "delete-link"
	// opRestoreSysctl sets a setting back if it changed: KEY VALUE.
	opRestoreSysctl Op = "restore-sysctl"
)

// action is one step of the undo plan.
type action struct {
	op   Op
	args []string
}

// String is the action as tests and logs show it.
func (a action) String() string { return strings.Join(append([]string{string(a.op)}, a.args...), " ") }

// seen is what undo sees on the host once the node's daemons are stopped.
type seen struct {
	mounts  []string
	chains  []Chain
	rules   []Rule
	cgroups []string
	// entries are the entries of the shared folders.
	entries []string
	// paths are the fixed paths that exist.
	paths []string
	// logLinks are the links in /var/log/containers, to their targets.
	logLinks map[string]string
	// nodeIDs are the ids of this node's CRI sandboxes, containers and
	// tasks: those with folders left, and every id its containerd logged.
	nodeIDs []string
	procs   []process
}

// shimOf tells whether args are those of a shim of this node's containerd
// (ShimOf).
func shimOf(args []string) (ns, id string, ok bool) { return ShimOf(containerdSocket, args) }

// ShimOf tells whether args are those of a shim of the containerd at
// address, and its namespace and id (containerd 1.6: the task's; 2.x: the
// group's), when it names them.
func ShimOf(address string, args []string) (ns, id string, ok bool) {
	shim := false
	for i, a := range args {
		if strings.Contains(a, "containerd-shim") {
			shim = true
		}
		if i+1 >= len(args) {
			continue
		}
		switch a {
		case "-address":
			ok = args[i+1] == address
		case "-namespace":
			ns = args[i+1]
		case "-id":
			id = args[i+1]
		}
	}
	return ns, id, shim && ok
}

// shimSocket is the socket of this node's shim ns/id (ShimSocket).
func shimSocket(ns, id string) string { return ShimSocket(containerdSocket, ns, id) }

// ShimSocket is the socket a shim of the containerd at address listens on,
// as containerd names it: the SHA-256 of address/ns/id in /run/containerd/s,
// whatever the daemon's own state directory.
func ShimSocket(address, ns, id string) string {
	sum := sha256.Sum256([]byte(address + "/" + ns + "/" + id))
	return filepath.Join(shimSocketDir, hex.EncodeToString(sum[:]))
}

// isNodeResult tells whether the CNI result name (libcni's
// <network>-<sandbox id>-<interface>) is of this node's network or of one
// of its sandboxes.
func isNodeResult(name string, ids []string) bool {
	if strings.HasPrefix(name, Bridge+"-") {
		return true
	}
	for _, id := range ids {
		if strings.Contains(name, "-"+id+"-") {
			return true
		}
	}
	return false
}

// jumpTarget is the chain a rule jumps or goes to, if any.
func jumpTarget(spec string) string {
	words, err := splitRule(spec)
	if err != nil {
		return ""
	}
	target := ""
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "-j" || words[i] == "-g" {
			target = words[i+1]
		}
	}
	return target
}

// plan is what undo does, in order, given the record of the host before
// node-up, the host now, and node-up's own changes: it removes what is new
// and this node's, and only reports what is new and someone else's.
func (n *Node) plan(before *Before, now *seen, changes []Change) []action {
	var plan []action
	add := func(op Op, args ...string) { plan = append(plan, action{op: op, args: args}) }
	wasMount, wasChain, wasCgroup := setOf(before.Mounts), setOf(before.Chains), setOf(before.Cgroups)
	wasPath, wasEntry := setOf(before.Paths), setOf(before.Entries)
	isPath, isEntry := setOf(now.paths), setOf(now.entries)
	newPath := func(p string) bool { return isPath[p] && !wasPath[p] }
	removed := map[string]bool{}
	removeEntry := func(e string) {
		if isEntry[e] && !wasEntry[e] && !removed[e] {
			removed[e] = true
			add(opRemove, e)
		}
	}

	// This containerd's shims that outlived it, with their sockets.
	for _, p := range now.procs {
		if ns, id, ok := shimOf(p.Args); ok {
			add(opKill, strconv.Itoa(p.PID))
			if ns != "" && id != "" {
				removeEntry(shimSocket(ns, id))
			}
		}
	}
	// The containers of a node whose containerd died before it could stop them.
	var pods []string
	for _, g := range now.cgroups {
		if filepath.Base(g) == "kubepods" && !wasCgroup[g] {
			pods = append(pods, g)
		}
	}
	if len(pods) > 0 {
		add(opKillCgroups, pods...)
	}

	// Mounts under the node's own folders, deepest first.
	mounts := slices.Clone(now.mounts)
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		if underDirs(m, n.dirs()...) {
			add(opUnmount, m)
		}
	}
	for _, m := range now.mounts {
		if !wasMount[m] && !underDirs(m, n.dirs()...) {
			add(opKeep, m+" was mounted while the node ran, not under its dirs")
		}
	}

	// The kubelet's device-plugin socket, and its links into its pod logs.
	removeEntry(kubeletSocket)
	links := make([]string, 0, len(now.logLinks))
	for l := range now.logLinks {
		links = append(links, l)
	}
	sort.Strings(links)
	for _, l := range links {
		if underDirs(now.logLinks[l], n.podLogs()) {
			add(opRemove, l)
		}
	}
	// libcni's results of this node's network, and of its sandboxes that were never torn down.
	for _, e := range now.entries {
		if filepath.Dir(e) == cniResultDir && isNodeResult(filepath.Base(e), now.nodeIDs) {
			removeEntry(e)
		}
	}
	// The sockets that killed shims of this containerd's tasks left behind.
	for _, id := range now.nodeIDs {
		for _, ns := range []string{"k8s.io", "default"} {
			removeEntry(shimSocket(ns, id))
		}
	}
	// The fixed folders that are new, deepest first: whole, or only if empty
	// where other software may have written into them meanwhile.
	for _, d := range []string{"/var/lib/kubelet/device-plugins", cniResultDir, shimSocketDir} {
		if newPath(d) {
			add(opRmdir, d)
		}
	}
	for _, d := range []string{"/var/lib/kubelet", "/var/lib/cni", "/run/mount"} {
		if newPath(d) {
			add(opRemoveTree, d)
		}
	}
	for _, d := range []string{logLinkDir, "/run/containerd"} {
		if newPath(d) {
			add(opRmdir, d)
		}
	}

	// New chains, and the rules of older chains that jump to them.
	isNew := map[Chain]bool{}
	var tables []string
	newChains := map[string][]string{}
	for _, c := range now.chains {
		if wasChain[c.String()] {
			continue
		}
		isNew[c] = true
		t := c.IPT + " " + c.Table
		if newChains[t] == nil {
			tables = append(tables, t)
		}
		newChains[t] = append(newChains[t], c.Name)
	}
	for _, r := range now.rules {
		f := strings.Fields(r.Spec)
		if len(f) < 2 || isNew[Chain{IPT: r.IPT, Table: r.Table, Name: f[1]}] {
			continue
		}
		if t := jumpTarget(r.Spec); t != "" && isNew[Chain{IPT: r.IPT, Table: r.Table, Name: t}] {
			add(opDeleteRule, r.IPT, r.Table, r.Spec)
		}
	}
	for _, t := range tables {
		add(opDeleteChains, append(strings.Fields(t), newChains[t]...)...)
	}
	// iptables' lock, after the last iptables command.
	if newPath("/run/xtables.lock") {
		add(opRemove, "/run/xtables.lock")
	}

	// New kubepods and k8s.io cgroups; other new ones are someone else's.
	for _, g := range now.cgroups {
		switch {
		case wasCgroup[g]:
		case filepath.Base(g) == "kubepods" || filepath.Base(g) == "k8s.io":
			add(opRemoveCgroup, g)
		default:
			add(opKeep, "the cgroup "+g+" was made while the node ran")
		}
	}

	// node-up's own changes, last first.
	for i := len(changes) - 1; i >= 0; i-- {
		c := changes[i]
		switch c.Kind {
		case KindPath:
			add(opRemoveTree, c.Args[0])
		case KindLink:
			add(opDeleteLink, c.Args[0])
		case KindSysctl:
			add(opRestoreSysctl, c.Args...)
		case KindChain:
			// Deleted above, as a chain that is new.
		}
	}
	return plan
}

// look reads what undo needs from the host.
func (n *Node) look() (*seen, error) {
	mounts, err := mountPoints()
	if err != nil {
		return nil, err
	}
	s := &seen{
		mounts:   mounts,
		cgroups:  hostCgroups(),
		entries:  sharedEntries(),
		paths:    existingPaths(fixedPaths),
		logLinks: map[string]string{},
		procs:    processes(),
	}
	if s.chains, s.rules, err = hostRules(); err != nil {
		return nil, err
	}
	for _, e := range s.entries {
		if filepath.Dir(e) != logLinkDir {
			continue
		}
		if t, err := os.Readlink(e); err == nil {
			s.logLinks[e] = t
		}
	}
	// From containerd's own root and state folders: they outlive a
	// containerd that died, and sandboxes that were never torn down.
	var ids []string
	for _, pattern := range []string{
		filepath.Join(n.nodeDir(), "containerd/root/io.containerd.grpc.v1.cri/*/*"),
		filepath.Join(RunDir, "containerd/io.containerd.grpc.v1.cri/*/*"),
		filepath.Join(RunDir, "containerd/io.containerd.runtime.v2.task/*/*"),
	} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				ids = append(ids, filepath.Base(d))
			}
		}
	}
	// A shim that died without removing its socket leaves no folder: its
	// id is only in containerd's log, which node-down keeps in the record.
	if f, err := os.Open(filepath.Join(n.recordDir(), containerdLog)); err == nil {
		ids = append(ids, loggedIDs(f)...)
		f.Close()
	}
	s.nodeIDs = sortedUnique(ids)
	return s, nil
}

// containerdLog is the copy of the node's containerd log that node-down
// leaves in the record for undo.
const containerdLog = "containerd.log"

var idRE = regexp.MustCompile(`\b[0-9a-f]{64}\b`)

// loggedIDs returns the 64-hex ids (and digests, which match no socket) in a
// containerd log.
func loggedIDs(r io.Reader) []string {
	var ids []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		ids = append(ids, idRE.FindAllString(sc.Text(), -1)...)
	}
	return ids
}

// Undo undoes what node-up and its daemons changed on the host, once they
// are stopped, and then removes the record. Without a record it changes
// nothing. When a step fails it goes on with the others, and keeps the
// record for another try.
func (n *Node) Undo() error {
	f, err := os.Open(n.manifestPath())
	if errors.Is(err, fs.ErrNotExist) {
		n.Logf("no record of a node of this clone (%s): the host is left alone", n.manifestPath())
		return nil
	}
	if err != nil {
		return err
	}
	changes, err := ParseManifest(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", n.manifestPath(), err)
	}
	before, err := readBefore(n.beforeDir())
	if err != nil {
		return err
	}
	now, err := n.look()
	if err != nil {
		return err
	}
	failed := 0
	for _, a := range n.plan(before, now, changes) {
		if err := n.do(a); err != nil {
			n.Logf("could not %s: %v", a, err)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d steps of undoing the node failed (above); the record stays in %s for another node-down", failed, n.recordDir())
	}
	if err := os.RemoveAll(n.recordDir()); err != nil {
		return err
	}
	n.Logf("host restored as recorded")
	return nil
}

// do carries out one action.
func (n *Node) do(a action) error {
	switch a.op {
	case opKill:
		pid, err := strconv.Atoi(a.args[0])
		if err != nil {
			return err
		}
		if unix.Kill(pid, unix.SIGKILL) == nil {
			n.Logf("killed leftover shim %d", pid)
		}
	case opKillCgroups:
		if k := killCgroups(a.args); k > 0 {
			n.Logf("killed %d leftover pod processes", k)
			time.Sleep(500 * time.Millisecond)
		}
	case opUnmount:
		return unmount(a.args[0])
	case opKeep:
		n.Logf("left alone: %s", a.args[0])
	case opRemove:
		if err := os.Remove(a.args[0]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	case opRmdir:
		// Someone else's entries keep it.
		_ = unix.Rmdir(a.args[0])
	case opRemoveTree:
		if err := unmountUnder(a.args[0]); err != nil {
			return err
		}
		return removeTree(a.args[0])
	case opDeleteRule:
		words, err := splitRule(a.args[2])
		if err != nil {
			return err
		}
		return run(a.args[0], append([]string{"-w", "-t", a.args[1], "-D"}, words[1:]...)...)
	case opDeleteChains:
		ipt, table, chains := a.args[0], a.args[1], a.args[2:]
		for _, verb := range []string{"-F", "-X"} {
			for _, c := range chains {
				if err := run(ipt, "-w", "-t", table, verb, c); err != nil {
					return err
				}
			}
		}
		n.Logf("deleted %s %s chains: %s", ipt, table, strings.Join(chains, " "))
	case opRemoveCgroup:
		return removeCgroup(a.args[0])
	case opDeleteLink:
		if _, err := net.InterfaceByName(a.args[0]); err != nil {
			return nil
		}
		if err := run("ip", "link", "del", a.args[0]); err != nil {
			return err
		}
		n.Logf("deleted link %s", a.args[0])
	case opRestoreSysctl:
		if v, err := readSysctl(a.args[0]); err == nil && v == a.args[1] {
			return nil
		}
		return writeSysctl(a.args[0], a.args[1])
	default:
		return fmt.Errorf("unknown action %q", a.op)
	}
	return nil
}

// killCgroups kills every process in the cgroup trees and returns how many.
func killCgroups(trees []string) int {
	killed := 0
	for _, t := range trees {
		_ = filepath.WalkDir(t, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && unix.Kill(pid, unix.SIGKILL) == nil {
					killed++
				}
			}
			return nil
		})
	}
	return killed
}

// removeCgroup removes a cgroup and its children, deepest first, waiting a
// little for killed processes to leave them.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var dirs []string
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = unix.Rmdir(dirs[i])
		}
		if !exists(dir) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cgroup %s still has tasks", dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// unmount unmounts a mount point, lazily if it is busy.
func unmount(dir string) error {
	if err := run("umount", dir); err != nil {
		if errLazy := run("umount", "-l", dir); errLazy != nil {
			return err
		}
	}
	return nil
}

// unmountUnder unmounts every mount point at or below dir, deepest first.
func unmountUnder(dir string) error {
	points, err := mountPoints()
	if err != nil {
		return err
	}
	for i := len(points) - 1; i >= 0; i-- {
		if underDirs(points[i], dir) {
			if err := unmount(points[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeTree removes path and everything below it, but nothing on another
// file system (like rm -rf --one-file-system).
func removeTree(path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return removeOn(path, st.Dev)
}

// removeOn removes path and what is below it on the file system dev.
func removeOn(path string, dev uint64) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return os.Remove(path)
	}
	if st.Dev != dev {
		return fmt.Errorf("%s is on another file system: left alone", path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, removeOn(filepath.Join(path, e.Name()), dev))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.Remove(path)
}
