"use strict";
// Starts Redoc (api/templates/api/redoc.html). The nonce comes from this script's own tag:
// a script may read its nonce, markup injected into the page may not.
(function () {
  const container = document.getElementById("redoc-container");
  const nonce = document.currentScript.nonce;
  Redoc.init(container.dataset.schemaUrl, { nonce: nonce }, container);
})();
