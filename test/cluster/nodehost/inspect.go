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
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// tables are the iptables tables node-up's daemons write.
var tables = []string{"filter", "nat", "mangle", "raw"}

// Chain is an iptables chain: IPT (iptables or ip6tables) TABLE NAME.
type Chain struct {
	IPT, Table, Name string
}

// String is how before/chains holds the chain.
func (c Chain) String() string { return c.IPT + " " + c.Table + " " + c.Name }

// Rule is a rule of an iptables chain, as `IPT -t TABLE -S` prints it ("-A CHAIN ...").
type Rule struct {
	IPT, Table, Spec string
}

// parseRules reads `IPT -t TABLE -S`: its chains (-P, -N) and its rules (-A), in order.
func parseRules(ipt, table, out string) ([]Chain, []Rule) {
	var chains []Chain
	var rules []Rule
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "-P", "-N":
			chains = append(chains, Chain{IPT: ipt, Table: table, Name: f[1]})
		case "-A":
			rules = append(rules, Rule{IPT: ipt, Table: table, Spec: line})
		}
	}
	return chains, rules
}

// ipts returns the iptables commands present.
func ipts() []string {
	var out []string
	for _, ipt := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(ipt); err == nil {
			out = append(out, ipt)
		}
	}
	return out
}

// iptablesSave returns `IPT -t TABLE -S` of every table of every iptables
// present, keyed "IPT TABLE"; a table the kernel lacks is left out. IPv4's
// filter table must be there: read as empty, every chain would look new to
// undo.
func iptablesSave() (keys []string, saved map[string]string, err error) {
	saved = map[string]string{}
	for _, ipt := range ipts() {
		for _, t := range tables {
			out, err := exec.Command(ipt, "-w", "-t", t, "-S").Output()
			if err != nil && ipt == "iptables" && t == "filter" {
				return nil, nil, fmt.Errorf("iptables -t filter -S: %w", err)
			}
			if err != nil {
				continue
			}
			k := ipt + " " + t
			keys = append(keys, k)
			saved[k] = string(out)
		}
	}
	return keys, saved, nil
}

// hostRules returns every iptables chain and rule.
func hostRules() ([]Chain, []Rule, error) {
	var chains []Chain
	var rules []Rule
	keys, saved, err := iptablesSave()
	if err != nil {
		return nil, nil, err
	}
	for _, k := range keys {
		ipt, t, _ := strings.Cut(k, " ")
		c, r := parseRules(ipt, t, saved[k])
		chains = append(chains, c...)
		rules = append(rules, r...)
	}
	return chains, rules, nil
}

// splitRule splits a rule as iptables -S prints it into its words: words
// with spaces are in double quotes, with \" and \\ escaped inside.
func splitRule(spec string) ([]string, error) {
	var words []string
	var w strings.Builder
	in, quoted, escaped := false, false, false
	for _, r := range spec {
		switch {
		case escaped:
			w.WriteRune(r)
			escaped = false
		case quoted && r == '\\':
			escaped = true
		case r == '"':
			quoted = !quoted
			in = true
		case !quoted && (r == ' ' || r == '\t'):
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if quoted || escaped {
		return nil, fmt.Errorf("unterminated quote in the rule %q", spec)
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}

// mount is a line of /proc/self/mountinfo.
type mount struct {
	Point, FSType, Source string
}

// parseMountinfo reads /proc/self/mountinfo.
func parseMountinfo(r io.Reader) ([]mount, error) {
	var mounts []mount
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		f := strings.Fields(s.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+2 >= len(f) {
			return nil, fmt.Errorf("mountinfo: cannot read %q", s.Text())
		}
		mounts = append(mounts, mount{Point: unescapeOctal(f[4]), FSType: f[sep+1], Source: unescapeOctal(f[sep+2])})
	}
	return mounts, s.Err()
}

// unescapeOctal undoes the kernel's \040-style escapes of spaces, tabs,
// newlines and backslashes.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hostMounts returns every mount of this mount namespace.
func hostMounts() ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// mountPoints returns the mount points, sorted, once each.
func mountPoints() ([]string, error) {
	mounts, err := hostMounts()
	if err != nil {
		return nil, err
	}
	var points []string
	for _, m := range mounts {
		points = append(points, m.Point)
	}
	return sortedUnique(points), nil
}

// hostCgroups returns the top-level cgroups of each hierarchy.
func hostCgroups() []string {
	var out []string
	hierarchies, _ := os.ReadDir(cgroupRoot)
	for _, h := range hierarchies {
		if !h.IsDir() {
			continue
		}
		groups, _ := os.ReadDir(filepath.Join(cgroupRoot, h.Name()))
		for _, g := range groups {
			if g.IsDir() {
				out = append(out, filepath.Join(cgroupRoot, h.Name(), g.Name()))
			}
		}
	}
	sort.Strings(out)
	return out
}

// sharedEntries returns the entries of the shared folders.
func sharedEntries() []string {
	var out []string
	for _, d := range sharedDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// existingPaths returns those of paths that exist.
func existingPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if exists(p) {
			out = append(out, p)
		}
	}
	return out
}

// sysctlPath is the /proc/sys file of a setting.
func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

// readSysctl returns a setting's value.
func readSysctl(key string) (string, error) {
	b, err := os.ReadFile(sysctlPath(key))
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeSysctl sets a setting.
func writeSysctl(key, value string) error {
	if err := os.WriteFile(sysctlPath(key), []byte(value), 0); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// process is a running process and its arguments.
type process struct {
	PID  int
	Args []string
}

// processes returns every process whose command line can be read.
func processes() []process {
	var out []process
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		out = append(out, process{PID: pid, Args: strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")})
	}
	return out
}

// run runs a command, returning its combined output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// underDirs tells whether path is one of dirs or inside one.
func underDirs(path string, dirs ...string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// sortedUnique returns lines sorted, once each.
func sortedUnique(lines []string) []string {
	out := append([]string(nil), lines...)
	sort.Strings(out)
	n := 0
	for i, l := range out {
		if i == 0 || l != out[n-1] {
			out[n] = l
			n++
		}
	}
	return out[:n]
}

// setOf makes a set of lines.
func setOf(lines []string) map[string]bool {
	s := make(map[string]bool, len(lines))
	for _, l := range lines {
		s[l] = true
	}
	return s
}
