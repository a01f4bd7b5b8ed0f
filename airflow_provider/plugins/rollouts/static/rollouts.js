// The Rollouts view's pages: plain JavaScript, no build step, no dependency.
// Loaded by page.html in order (widgets.js, charts.js, list.js, deployment.js, fleet.js, rollouts.js): plain scripts
// sharing one scope, each defining what the later ones use.
"use strict";

// ------------------------------------------------------------------------------------------ start
applyColourMode();
const PAGES = { deployments: deploymentsPage, deployment: deploymentPage, fleet: fleetPage };
(PAGES[BODY.dataset.page] || deploymentsPage)().catch((error) => showError(VIEW, error));
