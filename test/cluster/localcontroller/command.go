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

package localcontroller

import (
	"fmt"
	"strconv"
)

// Usage is the command line Parse accepts.
const Usage = "start [N] | stop [N] | restart [N] | kill [N] | status | leader"

// Command is a parsed command line.
type Command struct {
	// Verb is start, stop, restart, kill, status, leader or watchdog.
	Verb string
	// Instance is the instance to act on; 0 means every instance (stop, kill).
	Instance int
	// ControllerPID and APIServerPID are the watchdog's.
	ControllerPID, APIServerPID int
}

// WatchdogVerb is the hidden verb under which Start runs the watchdog.
const WatchdogVerb = "__watchdog"

// Parse parses a command line, without the program name.
func Parse(args []string) (Command, error) {
	usage := fmt.Errorf("usage: run-controller %s", Usage)
	if len(args) == 0 {
		return Command{}, usage
	}
	cmd := Command{Verb: args[0]}
	rest := args[1:]
	switch cmd.Verb {
	case "start", "restart", "stop", "kill":
		if len(rest) > 1 {
			return Command{}, usage
		}
		if cmd.Verb == "start" || cmd.Verb == "restart" {
			cmd.Instance = 1
		}
		if len(rest) == 1 {
			n, err := parseInstance(rest[0])
			if err != nil {
				return Command{}, err
			}
			cmd.Instance = n
		}
	case "status", "leader":
		if len(rest) != 0 {
			return Command{}, usage
		}
	case WatchdogVerb:
		if len(rest) != 3 {
			return Command{}, fmt.Errorf("usage: %s N CONTROLLER_PID APISERVER_PID", WatchdogVerb)
		}
		var err error
		if cmd.Instance, err = parseInstance(rest[0]); err != nil {
			return Command{}, err
		}
		if cmd.ControllerPID, err = strconv.Atoi(rest[1]); err != nil {
			return Command{}, fmt.Errorf("controller pid %q: %w", rest[1], err)
		}
		if cmd.APIServerPID, err = strconv.Atoi(rest[2]); err != nil {
			return Command{}, fmt.Errorf("API server pid %q: %w", rest[2], err)
		}
	default:
		return Command{}, usage
	}
	return cmd, nil
}

// parseInstance parses an instance number: a positive decimal.
func parseInstance(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("instance must be a positive number, not %q", s)
	}
	return n, nil
}
