module github.com/skippr-dev/skippr/plugins/postgres

go 1.26.0

require github.com/skippr-dev/skippr/plugin-sdk v0.0.0

replace github.com/skippr-dev/skippr/plugin-sdk => ../../plugin-sdk
