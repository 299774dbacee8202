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

// Command cluster-files writes the files the local cluster's scripts need:
//
//	cluster-files pki DIR BRIDGE_IP SERVICE_IP NODE   the CA, the components' certificates, the service-account key
//	cluster-files signing-key KEY_FILE PUBLIC_FILE    the ECDSA key Tekton Chains signs with
//	cluster-files tekton-crds DIR                     Tekton's CRDs in DIR without webhook conversion, to stdout
//	cluster-files config ROOT                         ROOT/config without Deployments and CRDs, to stdout
package main

import (
	"fmt"
	"net"
	"os"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/manifests"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/pki"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster-files:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	usage := fmt.Errorf("usage: cluster-files pki DIR BRIDGE_IP SERVICE_IP NODE | signing-key KEY_FILE PUBLIC_FILE | tekton-crds DIR | config ROOT")
	if len(args) == 0 {
		return usage
	}
	switch cmd, args := args[0], args[1:]; {
	case cmd == "pki" && len(args) == 4:
		bridge, service := net.ParseIP(args[1]), net.ParseIP(args[2])
		if bridge == nil || service == nil {
			return fmt.Errorf("pki: %q or %q is not an IP address", args[1], args[2])
		}
		return pki.Write(args[0], pki.Cluster(bridge, service, args[3]))
	case cmd == "signing-key" && len(args) == 2:
		return pki.SigningKey(args[0], args[1])
	case cmd == "tekton-crds" && len(args) == 1:
		return write(manifests.TektonCRDs(args[0]))
	case cmd == "config" && len(args) == 1:
		return write(manifests.Config(args[0]))
	}
	return usage
}

func write(b []byte, err error) error {
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(b)
	return err
}
