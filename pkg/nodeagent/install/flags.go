package install

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodeagent/install/envflag"
)

// The flags more than one subcommand takes, each group bound by one
// function that every subcommand calls (as BindPaths binds the
// directories): its name, variable, default and check are spelled there
// only.

// PluginSettings are the plugin's settings that the agent writes into its
// conflist entry and that inspect judges a pod by.
type PluginSettings struct {
	ExcludeNamespaces []string
	// IPv6Redirect is the plugin's ipv6_redirect (decision.IPv6Policy).
	IPv6Redirect decision.IPv6Policy
	// NativeNftables is the plugin's native_nftables: pods' rules are
	// upstream's native nftables ruleset.
	NativeNftables bool
}

// BindPluginSettings declares --exclude-namespaces, --ipv6-redirect and
// --native-nftables. Call the returned function after parsing for the
// checked settings.
func BindPluginSettings(f envflag.Set) func() (PluginSettings, error) {
	var exclude, ipv6, native string
	f.String(&exclude, "exclude-namespaces", "EXCLUDE_NAMESPACES", DefaultExcludeNamespaces, "comma-separated namespaces the plugin never redirects")
	f.String(&ipv6, "ipv6-redirect", "IPV6_REDIRECT", string(decision.IPv6Always), "for pods with IPv6 whose proxy is not dual-stack: always capture IPv6 (connections the proxy cannot take are refused), or dual-stack-only (they go direct, as upstream's)")
	f.String(&native, "native-nftables", "NATIVE_NFTABLES", "false", "true writes pods' rules as native nftables (upstream's global.nativeNftables), over netlink: the node needs no iptables and no nft")
	return func() (PluginSettings, error) {
		var s PluginSettings
		var errs []error
		var err error
		if s.NativeNftables, err = strconv.ParseBool(native); err != nil {
			errs = append(errs, fmt.Errorf("--native-nftables: %q: want true or false", native))
		}
		if s.IPv6Redirect, err = decision.ParseIPv6Policy(ipv6); err != nil {
			errs = append(errs, fmt.Errorf("--ipv6-redirect: %w", err))
		}
		if exclude != "" {
			s.ExcludeNamespaces = strings.Split(exclude, ",")
		}
		for _, ns := range s.ExcludeNamespaces {
			if !kube.ValidNamespace(ns) {
				errs = append(errs, fmt.Errorf("--exclude-namespaces: %q is not a namespace name: want 1 to 63 lower-case letters, digits and '-', comma-separated", ns))
			}
		}
		return s, errors.Join(errs...)
	}
}

// OwnFiles tell the installer's files on the node from others': the image's
// plugin binaries it copies (and recognises), and its config's name. The
// agent writes them; the uninstall subcommand removes them.
type OwnFiles struct {
	// PluginSource is the image's directory of PluginBinaries.
	PluginSource    string
	OwnedConfigName string
}

// BindOwnFiles declares --plugin-source, defaulting to selfDir (the
// image's directory of the running binary), and --owned-config-name. Call
// the returned function after parsing, with whether istio-cni is chained:
// an unnamed config is DefaultOwnedName chained, DefaultStandaloneName
// not.
func BindOwnFiles(f envflag.Set, selfDir string) func(chained bool) OwnFiles {
	var o OwnFiles
	f.String(&o.PluginSource, "plugin-source", "PLUGIN_SOURCE", selfDir, "directory holding the plugin binaries "+strings.Join(PluginBinaries, ", ")+" in the image")
	f.String(&o.OwnedConfigName, "owned-config-name", "OWNED_CONFIG_NAME", "", "preferred name of the owned conflist (default "+DefaultOwnedName+"), or of the standalone config (default "+DefaultStandaloneName+")")
	return func(chained bool) OwnFiles {
		named := o
		switch {
		case named.OwnedConfigName != "":
		case chained:
			named.OwnedConfigName = DefaultOwnedName
		default:
			named.OwnedConfigName = DefaultStandaloneName
		}
		return named
	}
}

// DefaultAgentNamespace is the namespace the manifests install the agent
// in.
const DefaultAgentNamespace = "istio-cni"

// BindPodNamespace declares --pod-namespace (POD_NAMESPACE): the agent's
// own namespace, which its DaemonSet sets from the downward API. The agent
// requires it (it names the agent's objects and the plugin's tokens); a
// subcommand run on the node itself, with no such variable, takes
// DefaultAgentNamespace. Call the returned function after parsing.
func BindPodNamespace(f envflag.Set, required bool) func() (string, error) {
	def, usage := DefaultAgentNamespace, "the agent's namespace (downward API)"
	if required {
		def, usage = "", "the agent's namespace (downward API; required)"
	}
	var ns string
	f.String(&ns, "pod-namespace", "POD_NAMESPACE", def, usage)
	return func() (string, error) {
		if !kube.ValidNamespace(ns) {
			return "", fmt.Errorf("--pod-namespace %q: the agent's namespace (POD_NAMESPACE from the downward API): want 1 to 63 lower-case letters, digits and '-'", ns)
		}
		return ns, nil
	}
}
