package protocol

// SDKVersion is this SDK's release: the module is tagged plugin-sdk/v<SDKVersion>, and plugin-sdk/README.md's
// table says which protocol versions each release speaks. Raise it with every change a plugin author can see.
const SDKVersion = "0.8.1"
