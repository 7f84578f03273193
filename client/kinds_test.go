package client_test

// The tests serve jobs of every kind from an engine in this process:
// register the kinds, as the binary does.
import _ "github.com/mlstream/mlstream/kinds/all"
