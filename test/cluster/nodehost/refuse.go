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
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// ErrRefused is Refuse's error: something node-up needs is taken.
var ErrRefused = errors.New("node-up refuses to start: what it needs is taken (nothing was changed)")

// claims is what Refuse looks at: who holds what node-up needs.
type claims struct {
	// runDir tells whether RunDir exists, and owner which clone's node it is.
	runDir bool
	owner  string
	// links are the network links' names.
	links []string
	// addrs are the IPv4 addresses, "LINK ADDRESS/PREFIX".
	addrs []string
	// routes are the IPv4 routes into BridgeCIDR.
	routes []string
	// kubeletSocket tells whether the kubelet's device-plugin socket exists.
	kubeletSocket bool
	// kubepods are the kubelet's top-level cgroups.
	kubepods []string
	// chains are the iptables chains.
	chains []Chain
}

// refusals names, one a line, what of c keeps node-up from starting.
func refusals(c claims) []string {
	var out []string
	if c.runDir {
		what := RunDir + " exists"
		if c.owner != "" {
			what += fmt.Sprintf(" (the node of %s: stop it with %s/test/cluster/node-down.sh)", c.owner, c.owner)
		}
		out = append(out, what)
	}
	if slices.Contains(c.links, Bridge) {
		out = append(out, fmt.Sprintf("the network interface %s exists", Bridge))
	}
	_, cidr, _ := net.ParseCIDR(BridgeCIDR)
	var inUse []string
	for _, a := range c.addrs {
		_, addr, _ := strings.Cut(a, " ")
		if ip, _, err := net.ParseCIDR(addr); err == nil && cidr.Contains(ip) {
			inUse = append(inUse, a)
		}
	}
	if len(inUse) > 0 {
		out = append(out, fmt.Sprintf("addresses in %s are in use: %s", BridgeCIDR, strings.Join(inUse, ", ")))
	}
	if len(c.routes) > 0 {
		out = append(out, fmt.Sprintf("routes into %s exist: %s", BridgeCIDR, strings.Join(c.routes, ", ")))
	}
	if c.kubeletSocket {
		out = append(out, kubeletSocket+" exists: another kubelet runs or ran here")
	}
	for _, g := range c.kubepods {
		out = append(out, fmt.Sprintf("the cgroup %s exists: another kubelet runs or ran here", g))
	}
	for _, ch := range c.chains {
		if ch.Name == GuardChain || slices.Contains(foreignKubeChains, ch.Name) {
			out = append(out, fmt.Sprintf("the %s chain %s exists in table %s: another node, kubelet or kube-proxy runs or ran here", ch.IPT, ch.Name, ch.Table))
		}
	}
	return out
}

// readClaims looks at the host.
func readClaims() (claims, error) {
	c := claims{runDir: exists(RunDir), kubeletSocket: exists(kubeletSocket)}
	if b, err := os.ReadFile(ownerFile); err == nil {
		c.owner = strings.TrimSpace(string(b))
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return claims{}, err
	}
	for _, i := range ifaces {
		c.links = append(c.links, i.Name)
		addrs, err := i.Addrs()
		if err != nil {
			return claims{}, fmt.Errorf("addresses of %s: %w", i.Name, err)
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				c.addrs = append(c.addrs, i.Name+" "+a.String())
			}
		}
	}
	out, err := exec.Command("ip", "-4", "route", "show", "root", BridgeCIDR).Output()
	if err != nil {
		return claims{}, fmt.Errorf("ip route show root %s: %w", BridgeCIDR, err)
	}
	c.routes = splitLines(string(out))
	groups, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "kubepods"))
	for _, g := range append(groups, filepath.Join(cgroupRoot, "kubepods")) {
		if st, err := os.Stat(g); err == nil && st.IsDir() {
			c.kubepods = append(c.kubepods, g)
		}
	}
	c.chains, _, err = hostRules()
	return c, err
}

// Refuse returns ErrRefused, having changed nothing and logged why, when
// something that is not this clone's node holds what the node needs. node-up
// runs it after this clone's own leftovers are undone.
func (n *Node) Refuse() error {
	c, err := readClaims()
	if err != nil {
		return err
	}
	problems := refusals(c)
	for _, p := range problems {
		n.Logf("refusing: %s", p)
	}
	if len(problems) > 0 {
		return ErrRefused
	}
	return nil
}
