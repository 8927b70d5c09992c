// Package envflag declares command-line flags whose defaults come from
// environment variables, as a DaemonSet sets them from its ConfigMap: a
// flag given on the command line wins over its variable, which wins over
// the built-in default. Values stay strings; each package parses and
// validates its own, so an error names the flag and what it allows.
package envflag

import "flag"

// Set declares string flags on one FlagSet.
type Set struct {
	FS     *flag.FlagSet
	Getenv func(string) string
}

// String declares --name, defaulting to $env when set, else def. The usage
// text names the variable.
func (s Set) String(p *string, name, env, def, usage string) {
	if v := s.Getenv(env); v != "" {
		def = v
	}
	s.FS.StringVar(p, name, def, usage+" (env "+env+")")
}
