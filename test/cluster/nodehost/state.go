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
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// sections are State's sections, in the order Compare reports them.
var sections = []string{"mounts", "iptables", "links", "addresses", "routes", "cgroups", "paths"}

// volatileSysctls are settings that change by themselves.
var volatileSysctls = regexp.MustCompile(`^(fs\.(dentry-state|file-nr|inode-nr|inode-state|aio-nr|quota\..*)|kernel\.(ns_last_pid|random\..*|pty\.nr)|net\.netfilter\.nf_conntrack_count)$`)

// State is what node-up may change on the host, as the host test compares
// it before node-up and after node-down.
type State struct {
	// Sections holds, by section name, one line per mount (point, type,
	// source), iptables rule (in order), link, address, route, top-level
	// cgroup and path (the fixed paths, two levels deep).
	Sections map[string][]string `json:"sections"`
	// Sysctls holds every setting's value.
	Sysctls map[string]string `json:"sysctls"`
}

// Compare lists how now differs from before, one difference a line: "-
// SECTION: LINE" for what is gone, "+ SECTION: LINE" for what is new, "~
// iptables: ..." for rules in another order, and "sysctl KEY: BEFORE ->
// NOW" for a setting that changed. Settings present only in one are not
// compared (loading a module adds some).
func Compare(before, now *State) []string {
	var diffs []string
	for _, s := range sections {
		gone, added := multisetDiff(before.Sections[s], now.Sections[s])
		for _, l := range gone {
			diffs = append(diffs, fmt.Sprintf("- %s: %s", s, l))
		}
		for _, l := range added {
			diffs = append(diffs, fmt.Sprintf("+ %s: %s", s, l))
		}
		// The order of rules is what iptables means by them.
		if s == "iptables" && len(gone) == 0 && len(added) == 0 && !slices.Equal(before.Sections[s], now.Sections[s]) {
			diffs = append(diffs, "~ iptables: the same rules in another order")
		}
	}
	keys := make([]string, 0, len(before.Sysctls))
	for k := range before.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := now.Sysctls[k]; ok && v != before.Sysctls[k] {
			diffs = append(diffs, fmt.Sprintf("sysctl %s: %q -> %q", k, before.Sysctls[k], v))
		}
	}
	return diffs
}

// multisetDiff returns the lines of a missing from b, and of b missing from a, sorted.
func multisetDiff(a, b []string) (gone, added []string) {
	count := map[string]int{}
	for _, l := range a {
		count[l]++
	}
	for _, l := range b {
		count[l]--
	}
	for l, c := range count {
		for ; c > 0; c-- {
			gone = append(gone, l)
		}
		for ; c < 0; c++ {
			added = append(added, l)
		}
	}
	sort.Strings(gone)
	sort.Strings(added)
	return gone, added
}

// listeningSockets reads /proc/net/unix: the paths of the sockets something listens on.
func listeningSockets(r io.Reader) []string {
	var out []string
	s := bufio.NewScanner(r)
	for s.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 is __SO_ACCEPTCON.
		f := strings.Fields(s.Text())
		if len(f) >= 8 && f[3] == "00010000" {
			out = append(out, f[7])
		}
	}
	return out
}

// CaptureState reads the host's State. Left out, as other programs' that
// may run meanwhile: mounts under /tmp, cgroups named committer-*, and the
// shim sockets in /run/containerd/s that a live shim listens on (a shim of
// this node is dead after node-down; its stale socket counts).
func CaptureState() (*State, error) {
	st := &State{Sections: map[string][]string{}, Sysctls: map[string]string{}}
	mounts, err := hostMounts()
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		if !strings.HasPrefix(m.Point, "/tmp/") {
			st.Sections["mounts"] = append(st.Sections["mounts"], m.Point+" "+m.FSType+" "+m.Source)
		}
	}
	sort.Strings(st.Sections["mounts"])

	keys, saved, err := iptablesSave()
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		for _, l := range splitLines(saved[k]) {
			st.Sections["iptables"] = append(st.Sections["iptables"], k+" "+l)
		}
	}

	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, i := range ifaces {
		st.Sections["links"] = append(st.Sections["links"], i.Name)
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", i.Name, err)
		}
		for _, a := range addrs {
			st.Sections["addresses"] = append(st.Sections["addresses"], i.Name+" "+a.String())
		}
	}
	sort.Strings(st.Sections["links"])
	sort.Strings(st.Sections["addresses"])

	routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("ip route show table all: %w", err)
	}
	st.Sections["routes"] = splitLines(string(routes))
	sort.Strings(st.Sections["routes"])

	for _, g := range hostCgroups() {
		if !strings.Contains(g, "/committer-") {
			st.Sections["cgroups"] = append(st.Sections["cgroups"], g)
		}
	}

	unixSockets, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	live := setOf(listeningSockets(unixSockets))
	unixSockets.Close()
	var paths []string
	for _, p := range append(slices.Clone(fixedPaths), RunDir) {
		_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if !(filepath.Dir(q) == shimSocketDir && live[q]) {
				paths = append(paths, q)
			}
			if d.IsDir() && strings.Count(strings.TrimPrefix(q, p), "/") >= 2 {
				return filepath.SkipDir
			}
			return nil
		})
	}
	st.Sections["paths"] = sortedUnique(paths)

	err = filepath.WalkDir("/proc/sys", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		key := strings.ReplaceAll(strings.TrimPrefix(p, "/proc/sys/"), "/", ".")
		if volatileSysctls.MatchString(key) {
			return nil
		}
		// Write-only settings cannot be read: they hold nothing to compare.
		if b, err := os.ReadFile(p); err == nil {
			st.Sysctls[key] = strings.TrimSpace(string(b))
		}
		return nil
	})
	return st, err
}

// save writes the state to file.
func (s *State) save(file string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// loadState reads a state that save wrote.
func loadState(file string) (*State, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	s := &State{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}
