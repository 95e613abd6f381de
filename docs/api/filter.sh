#!/bin/sh
# Doxygen's input filter for include/octattn.h: the header's comments as documentation
# comments (a block before a declaration: /**; one after a member, an enumerator or a
# #define: /**<; the first: the file's), the rules between sections left as they are.
exec sed -E -e '1s|^/\* |/** @file\n * |' \
  -e 's|^([[:space:]]*)/\* ([^-])|\1/** \2|' \
  -e 's|([;,])([[:space:]]*)/\* |\1\2/**< |' \
  -e 's|^(#define [A-Za-z0-9_]+ [^/]*[^[:space:]/])([[:space:]]+)/\* |\1\2/**< |' "$1"
