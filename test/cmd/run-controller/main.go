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

// Command run-controller runs the controller (cmd/controller) as local
// processes against the cluster of test/cluster/cluster-up.sh, the way its
// Deployment runs it (package test/cluster/localcontroller says how).
//
//	run-controller start [N]    build if stale, start instance N (default 1), wait until it runs its controllers
//	run-controller stop [N]     SIGTERM instance N (default: every instance), SIGKILL after 10 s
//	run-controller restart [N]  stop, then start instance N (default 1)
//	run-controller kill [N]     SIGKILL instance N (default: every instance), as a crash would
//	run-controller status       the instances, their pids and ports, and which one leads
//	run-controller leader       the numbers of the instances holding a Lease of the controller
//
// Environment:
//
//	CONTROLLER_REGISTRY        set as config-snapshot's registry when that is empty
//	                           (default 127.0.0.1:5000/snapshots; empty: leave it alone)
//	CONTROLLER_TOKEN_DURATION  how long the ServiceAccount token lasts (default 24h;
//	                           restart to mint a new one)
//	SKIP_BUILD=1               run _output/bin/controller as it is
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/localcluster"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/localcontroller"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		localcluster.Logf("ERROR: %v", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cmd, err := localcontroller.Parse(args)
	if err != nil {
		return err
	}
	dirs, err := localcluster.Find()
	if err != nil {
		return err
	}
	registry, set := os.LookupEnv("CONTROLLER_REGISTRY")
	if !set {
		registry = "127.0.0.1:5000/snapshots"
	}
	duration := 24 * time.Hour
	if s := os.Getenv("CONTROLLER_TOKEN_DURATION"); s != "" {
		if duration, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("CONTROLLER_TOKEN_DURATION: %w", err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	c := &localcontroller.Controllers{
		Dirs:            dirs,
		Registry:        registry,
		TokenDuration:   duration,
		SkipBuild:       os.Getenv("SKIP_BUILD") == "1",
		WatchdogCommand: []string{exe, localcontroller.WatchdogVerb},
	}
	ctx := context.Background()
	switch cmd.Verb {
	case "start":
		return c.Start(ctx, cmd.Instance)
	case "stop":
		c.Stop(cmd.Instance)
	case "restart":
		c.Stop(cmd.Instance)
		return c.Start(ctx, cmd.Instance)
	case "kill":
		return c.Kill(cmd.Instance)
	case "status":
		c.Status(ctx, os.Stdout)
	case "leader":
		leaders, err := c.Leaders(ctx)
		if err != nil {
			return err
		}
		for _, n := range leaders {
			fmt.Println(n)
		}
	case localcontroller.WatchdogVerb:
		c.Watchdog(cmd.Instance, cmd.ControllerPID, cmd.APIServerPID)
	}
	return nil
}
